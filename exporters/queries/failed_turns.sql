-- Question: Which turns failed, with what error, and what had they done before failing?
-- Parameters:
--   since  optional  TIMESTAMPTZ  only turns started at or after this time
SELECT
  session_id, user_id, agent_id, turn_id, input, error, started_at, ended_at, duration_ms,
  runs, model_calls, tool_calls, tool_errors
FROM turns
WHERE status = 'failed'
  AND (getvariable('since') IS NULL OR started_at >= CAST(getvariable('since') AS TIMESTAMPTZ))
ORDER BY started_at, turn_id;
