-- Question: How many model tokens did each user's sessions use per day (UTC)?
-- Parameters:
--   user_id  optional  VARCHAR  only this user
-- Sums model_calls (gen_ai.usage.input_tokens / output_tokens) by the day the call started.
SELECT
  user_id,
  CAST(started_at AT TIME ZONE 'UTC' AS DATE) AS day,
  count(*) AS model_calls,
  CAST(coalesce(sum(input_tokens), 0) AS BIGINT) AS input_tokens,
  CAST(coalesce(sum(output_tokens), 0) AS BIGINT) AS output_tokens,
  CAST(coalesce(sum(input_tokens), 0) + CAST(coalesce(sum(output_tokens), 0) AS BIGINT) AS BIGINT) AS total_tokens
FROM model_calls
WHERE getvariable('user_id') IS NULL OR user_id = CAST(getvariable('user_id') AS VARCHAR)
GROUP BY user_id, day
ORDER BY user_id, day;
