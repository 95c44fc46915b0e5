-- Question: What did the sub-agents of one turn do (their children's too), and what did it cost?
-- Parameters:
--   turn_id  required  VARCHAR  the calling session's turn
-- One row per sub-agent call in the tree below the turn (depth 1 = called by the turn itself),
-- with the child's agent, task, outcome, tokens, and the tools its own turns called.
WITH RECURSIVE tree AS (
  SELECT c.*, 1 AS depth, c.call_id AS path
  FROM subagent_calls AS c
  WHERE c.turn_id = CAST(getvariable('turn_id') AS VARCHAR)
  UNION ALL
  SELECT c.*, t.depth + 1 AS depth, t.path || ' > ' || c.call_id AS path
  FROM subagent_calls AS c
  JOIN tree AS t ON c.session_key = t.child_key
), tools AS (
  SELECT namespace || '/' || user_id || '/' || agent_id || '/' || session_id AS session_key,
    count(*) AS tool_calls,
    string_agg(DISTINCT tool_name, ', ' ORDER BY tool_name) AS tools_used
  FROM tool_calls
  GROUP BY 1
)
SELECT
  t.depth, t.path, t.session_key AS called_by, t.call_id, t.child_agent_id, t.child_key,
  t.task, t.status, left(coalesce(t.output, t.error, ''), 200) AS result,
  t.input_tokens, t.output_tokens, t.duration_ms,
  coalesce(o.tool_calls, 0) AS tool_calls, o.tools_used
FROM tree AS t
LEFT JOIN tools AS o ON o.session_key = t.child_key
ORDER BY t.path;
