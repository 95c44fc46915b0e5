-- Question: Which cases got worse between two experiments (a baseline and a candidate)?
-- Parameters:
--   baseline   required  VARCHAR  the experiment to compare against (nb.evals replay name=)
--   candidate  required  VARCHAR  the experiment that may have regressed
--   score      optional  VARCHAR  only this score (an evaluator's name, e.g. EqualsExpected)
-- Returns one row per case and score that the candidate scored lower than the baseline,
-- largest drop first; booleans count 1 (pass) and 0 (fail). Cases are paired by name (the
-- recorded turn both replayed).
SELECT
  c.case_name, c.score, b.value AS baseline_value, c.value AS candidate_value,
  c.value - b.value AS change, c.reason AS candidate_reason, e.input, e.output AS candidate_output
FROM scores AS b
JOIN scores AS c ON c.case_name = b.case_name AND c.score = b.score
JOIN experiment_cases AS e ON e.experiment = c.experiment AND e.case_name = c.case_name
WHERE b.experiment = CAST(getvariable('baseline') AS VARCHAR)
  AND c.experiment = CAST(getvariable('candidate') AS VARCHAR)
  AND (getvariable('score') IS NULL OR c.score = CAST(getvariable('score') AS VARCHAR))
  AND c.value < b.value
ORDER BY change, c.case_name, c.score;
