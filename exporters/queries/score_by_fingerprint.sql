-- Question: How does each score move with the agent's fingerprint over time?
-- Parameters:
--   score  optional  VARCHAR      only this score (an evaluator's name)
--   since  optional  TIMESTAMPTZ  only scores given at or after this time
-- Returns one row per agent fingerprint, score and UTC day: the experiments and cases scored,
-- the mean value (a pass rate for booleans) and its range. A fingerprint changes whenever the
-- agent's instructions, tools or model do (agentnb.permissions.agent_digest).
SELECT
  agent_fingerprint, score, date_trunc('day', scored_at AT TIME ZONE 'UTC') AS day,
  count(DISTINCT experiment) AS experiments, count(*) AS cases,
  avg(value) AS mean_value, min(value) AS min_value, max(value) AS max_value,
  min(scored_at) AS first_scored_at
FROM scores
WHERE value IS NOT NULL
  AND (getvariable('score') IS NULL OR score = CAST(getvariable('score') AS VARCHAR))
  AND (getvariable('since') IS NULL OR scored_at >= CAST(getvariable('since') AS TIMESTAMPTZ))
GROUP BY ALL
ORDER BY day, agent_fingerprint, score;
