-- Question: Which sessions are parked right now (latest turn suspended, interrupted or failed), since when, and waiting on what?
-- Parameters:
--   user_id  optional  VARCHAR  only this user's sessions
-- A parked session runs nothing until someone answers its pending requests, resumes or
-- cancels the turn; a failed latest turn parks it too (new tasks wait behind it).
WITH latest AS (
  SELECT * FROM turns
  QUALIFY row_number() OVER (
    PARTITION BY namespace, user_id, agent_id, session_id ORDER BY started_at DESC, turn_id DESC
  ) = 1
)
SELECT
  l.namespace, l.user_id, l.agent_id, l.session_id, l.turn_id, l.status,
  l.last_event_at AS parked_since,
  (SELECT count(*) FROM interactions AS i WHERE i.turn_id = l.turn_id AND i.status = 'pending')
    AS pending_requests,
  (SELECT count(*) FROM tool_calls AS t WHERE t.turn_id = l.turn_id AND t.status = 'unknown')
    AS unknown_tool_calls
FROM latest AS l
WHERE l.status IN ('suspended', 'interrupted', 'failed')
  AND (getvariable('user_id') IS NULL OR l.user_id = CAST(getvariable('user_id') AS VARCHAR))
ORDER BY parked_since, l.session_id;
