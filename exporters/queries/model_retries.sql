-- Question: Which model calls needed retries, with which errors, and did they succeed in the end?
-- Parameters:
--   session_id  optional  VARCHAR  only this session
SELECT
  session_id, user_id, turn_id, run_id, model_call_id, request_model,
  attempts, retries, status, error AS last_error, started_at, ended_at, latency_ms
FROM model_calls
WHERE retries > 0
  AND (getvariable('session_id') IS NULL OR session_id = CAST(getvariable('session_id') AS VARCHAR))
ORDER BY started_at, model_call_id;
