-- Question: Which tool calls did people approve (with which arguments) or reject (why), who answered, when, and how long did the agent wait?
-- Parameters:
--   since       optional  TIMESTAMPTZ  only requests made at or after this time
--   session_id  optional  VARCHAR      only this session
-- Returns one row per answered or cancelled confirmation, oldest first; pending ones are in
-- parked_sessions. asked_arguments are the call's arguments as the model asked for them,
-- approved_arguments those the tool ran with (the person's edit, else the asked ones; NULL
-- unless approved), edited says whether the person changed them, reason why it was
-- rejected. answered_by is the session's user (who may answer its requests).
SELECT
  session_id, user_id, turn_id, request_id, tool_name,
  CASE WHEN status = 'cancelled' THEN 'cancelled'
       WHEN approved THEN 'approved' ELSE 'rejected' END AS decision,
  arguments AS asked_arguments, approved_arguments, edited,
  reason, answered_by, requested_at, resolved_at, wait_ms
FROM interactions
WHERE kind = 'confirmation' AND status <> 'pending'
  AND (getvariable('since') IS NULL OR requested_at >= CAST(getvariable('since') AS TIMESTAMPTZ))
  AND (getvariable('session_id') IS NULL OR session_id = CAST(getvariable('session_id') AS VARCHAR))
ORDER BY requested_at, request_id;
