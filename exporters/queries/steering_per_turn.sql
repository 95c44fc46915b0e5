-- Question: How much steering did each turn get, and was it applied?
-- Parameters:
--   session_id  optional  VARCHAR  only this session
-- One row per turn that received steering; texts are in order of arrival.
SELECT
  session_id, user_id, turn_id,
  count(*) AS steers,
  count(*) FILTER (WHERE status = 'applied') AS applied,
  count(*) FILTER (WHERE status = 'discarded') AS discarded,
  count(*) FILTER (WHERE status = 'pending') AS pending,
  list(text ORDER BY received_at) AS texts,
  min(received_at) AS first_at
FROM inputs
WHERE kind = 'steer'
  AND (getvariable('session_id') IS NULL OR session_id = CAST(getvariable('session_id') AS VARCHAR))
GROUP BY session_id, user_id, turn_id
ORDER BY first_at, turn_id;
