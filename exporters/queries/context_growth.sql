-- Question: How does the context each model call sees grow over a session, and where did compaction cut it?
-- Parameters:
--   session_id  optional  VARCHAR  only this session
SELECT
  session_id, seq, occurred_at, turn_id, run_id,
  json_extract_string(payload, '$.details.model_call_id') AS model_call_id,
  TRY_CAST(json_extract(payload, '$.message_count') AS BIGINT) AS messages,
  TRY_CAST(json_extract(payload, '$.details.tokens') AS BIGINT) AS tokens,
  TRY_CAST(json_extract(payload, '$.details.compactions') AS BIGINT) AS compactions
FROM events
WHERE type = 'context/build'
  AND (getvariable('session_id') IS NULL OR session_id = CAST(getvariable('session_id') AS VARCHAR))
ORDER BY session_id, seq;
