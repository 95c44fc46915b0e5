-- Question: Which runs were interrupted, why, and how long until their turn was resumed?
-- Parameters:
--   session_id  optional  VARCHAR  only this session
-- resumed_by_run is the next run of the same turn (NULL: not resumed yet); time_to_resume_ms
-- runs from the interruption to that run's start.
WITH ordered AS (
  SELECT *,
    lead(run_id) OVER (PARTITION BY turn_id ORDER BY run_index) AS next_run_id,
    lead(started_at) OVER (PARTITION BY turn_id ORDER BY run_index) AS next_started_at,
    lead(reason) OVER (PARTITION BY turn_id ORDER BY run_index) AS next_reason
  FROM runs
)
SELECT
  session_id, user_id, turn_id, run_id, end_reason, stop_requested, started_at,
  ended_at AS interrupted_at, next_run_id AS resumed_by_run, next_reason AS resume_reason,
  next_started_at AS resumed_at,
  epoch_ms(next_started_at) - epoch_ms(ended_at) AS time_to_resume_ms
FROM ordered
WHERE status = 'interrupted'
  AND (getvariable('session_id') IS NULL OR session_id = CAST(getvariable('session_id') AS VARCHAR))
ORDER BY started_at, run_id;
