-- Question: What did the agents do for whom: per session, how many turns, tool calls and tokens, and when?
-- Parameters:
--   user_id   optional  VARCHAR  only this user's sessions
--   agent_id  optional  VARCHAR  only this agent's sessions
SELECT
  namespace, user_id, agent_id, session_id,
  count(*) AS turns,
  count(*) FILTER (WHERE status = 'completed') AS completed,
  count(*) FILTER (WHERE status = 'failed') AS failed,
  CAST(sum(tool_calls) AS BIGINT) AS tool_calls,
  CAST(sum(input_tokens) AS BIGINT) AS input_tokens,
  CAST(sum(output_tokens) AS BIGINT) AS output_tokens,
  min(started_at) AS first_turn_at,
  max(last_event_at) AS last_activity_at
FROM turns
WHERE (getvariable('user_id') IS NULL OR user_id = CAST(getvariable('user_id') AS VARCHAR))
  AND (getvariable('agent_id') IS NULL OR agent_id = CAST(getvariable('agent_id') AS VARCHAR))
GROUP BY namespace, user_id, agent_id, session_id
ORDER BY first_turn_at, session_id;
