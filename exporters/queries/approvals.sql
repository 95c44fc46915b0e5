-- Question: Which tool calls did people approve or reject, who answered, when, and how long did the agent wait?
-- Parameters:
--   since       optional  TIMESTAMPTZ  only requests made at or after this time
--   session_id  optional  VARCHAR      only this session
-- Returns one row per answered or cancelled confirmation, oldest first; pending ones are in
-- parked_sessions. answered_by is the session's user (who may answer its requests).
SELECT
  session_id, user_id, turn_id, request_id, tool_name, arguments,
  CASE WHEN status = 'cancelled' THEN 'cancelled'
       WHEN approved THEN 'approved' ELSE 'rejected' END AS decision,
  reason, answered_by, requested_at, resolved_at, wait_ms
FROM interactions
WHERE kind = 'confirmation' AND status <> 'pending'
  AND (getvariable('since') IS NULL OR requested_at >= CAST(getvariable('since') AS TIMESTAMPTZ))
  AND (getvariable('session_id') IS NULL OR session_id = CAST(getvariable('session_id') AS VARCHAR))
ORDER BY requested_at, request_id;
