-- Question: Which tool calls had an uncertain outcome (cut off by a crash), and how were they settled?
-- Parameters:
--   session_id  optional  VARCHAR  only this session
-- status is reconciled when a person recorded the outcome (then outcome says which), unknown
-- while nobody has; idempotent calls may simply have been run again (attempts > 1).
SELECT
  session_id, user_id, turn_id, call_id, tool_name, arguments, idempotent, attempts,
  dispatched_at, status, outcome, output, reconciled, ended_at AS settled_at
FROM tool_calls
WHERE uncertain
  AND (getvariable('session_id') IS NULL OR session_id = CAST(getvariable('session_id') AS VARCHAR))
ORDER BY dispatched_at, call_id;
