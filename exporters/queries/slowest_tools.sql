-- Question: Which tools are slowest (and how often do they fail)?
-- Parameters:
--   top  optional  INTEGER  how many tools to list (default 10)
-- Durations are of calls that ran (tool/result with duration_ms); errors count error outcomes.
SELECT
  tool_name,
  count(*) AS calls,
  count(*) FILTER (WHERE outcome = 'error') AS errors,
  avg(duration_ms) AS avg_ms,
  quantile_cont(duration_ms, 0.9) AS p90_ms,
  max(duration_ms) AS max_ms
FROM tool_calls
WHERE duration_ms IS NOT NULL
GROUP BY tool_name
ORDER BY max_ms DESC, tool_name
LIMIT coalesce(CAST(getvariable('top') AS INTEGER), 10);
