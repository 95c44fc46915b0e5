-- Question: Which tools did each agent use, how often, and with which outcomes?
-- Parameters:
--   agent_id  optional  VARCHAR  only this agent
SELECT
  agent_id, tool_name, status,
  count(*) AS calls,
  count(DISTINCT turn_id) AS turns,
  sum(duration_ms) AS total_ms
FROM tool_calls
WHERE getvariable('agent_id') IS NULL OR agent_id = CAST(getvariable('agent_id') AS VARCHAR)
GROUP BY agent_id, tool_name, status
ORDER BY agent_id, tool_name, status;
