-- Question: What exactly happened in one turn, event by event?
-- Parameters:
--   turn_id  required  VARCHAR  the turn to show
-- The committed events of the turn in seq order, with the most useful fields.
SELECT
  seq, occurred_at, type, run_id, status, reason, tool_name, call_id, request_id,
  kind, left(coalesce(text, output, error, ''), 120) AS detail
FROM events
WHERE turn_id = CAST(getvariable('turn_id') AS VARCHAR)
ORDER BY seq;
