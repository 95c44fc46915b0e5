-- Question: How many turns does each agent have in each status, and how long do finished turns take (p50/p90/p99)?
-- Parameters:
--   since  optional  TIMESTAMPTZ  only turns started at or after this time
-- Latency is turn start to its final status (completed/failed/cancelled), HITL waits included;
-- it is NULL for turns that have not finished.
SELECT
  agent_id, status,
  count(*) AS turns,
  quantile_cont(duration_ms, 0.5) AS p50_ms,
  quantile_cont(duration_ms, 0.9) AS p90_ms,
  quantile_cont(duration_ms, 0.99) AS p99_ms,
  max(duration_ms) AS max_ms
FROM turns
WHERE getvariable('since') IS NULL OR started_at >= CAST(getvariable('since') AS TIMESTAMPTZ)
GROUP BY agent_id, status
ORDER BY agent_id, status;
