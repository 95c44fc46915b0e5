-- Question: What did each agent of a tree of sub-agents cost (tokens, calls, sessions)?
-- Parameters:
--   root_key  optional  VARCHAR  the root session, 'namespace/user_id/agent_id/session_id' (all trees if unset)
-- Tokens are each session's own model calls, so nothing is counted twice across the tree.
SELECT
  s.root_key, s.agent_id,
  count(DISTINCT s.session_key) AS sessions,
  min(s.depth) AS min_depth, max(s.depth) AS max_depth,
  sum(s.turns) AS turns,
  coalesce(sum(m.model_calls), 0) AS model_calls,
  CAST(coalesce(sum(s.input_tokens), 0) AS BIGINT) AS input_tokens,
  CAST(coalesce(sum(s.output_tokens), 0) AS BIGINT) AS output_tokens,
  CAST(coalesce(sum(s.input_tokens + s.output_tokens), 0) AS BIGINT) AS total_tokens
FROM sessions AS s
LEFT JOIN (
  SELECT namespace || '/' || user_id || '/' || agent_id || '/' || session_id AS session_key,
    count(*) AS model_calls
  FROM model_calls GROUP BY 1
) AS m USING (session_key)
WHERE getvariable('root_key') IS NULL OR s.root_key = CAST(getvariable('root_key') AS VARCHAR)
GROUP BY s.root_key, s.agent_id
ORDER BY s.root_key, total_tokens DESC, s.agent_id;
