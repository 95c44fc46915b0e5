-- Open a Parquet export (agentnb export --to parquet:DIR) in the DuckDB CLI: raw_events, and
-- turn_parts over the turn rollups committed with the data (so turns does not rescan events).
-- Parameters:
--   parquet_root  required  VARCHAR  the export folder (the one holding events/ and _manifest/)
-- Usage:
--   duckdb -c "SET VARIABLE parquet_root = 'exports/agentnb'" \
--          -c ".read exporters/parquet.sql" -c ".read exporters/schema.sql" \
--          -c ".read exporters/queries/slowest_tools.sql"
-- Reads exactly the files the manifest lists (every _manifest/*.json record: added minus
-- removed), which hold every event once: a file a crash left outside the manifest, or one an
-- export is still writing, never shows through.
CREATE OR REPLACE TEMP VIEW export_files AS
WITH records AS (
  SELECT added, removed
  FROM read_json(rtrim(getvariable('parquet_root'), '/') || '/_manifest/*.json',
                 columns = {'added': 'VARCHAR[]', 'removed': 'VARCHAR[]'})
)
SELECT rtrim(getvariable('parquet_root'), '/') || '/' || rel AS file
FROM (SELECT unnest(added) AS rel FROM records EXCEPT SELECT unnest(removed) FROM records);

CREATE OR REPLACE VIEW raw_events AS
SELECT * EXCLUDE (filename), CAST(occurred_at AT TIME ZONE 'UTC' AS DATE) AS event_date
FROM read_parquet(rtrim(getvariable('parquet_root'), '/') || '/events/*/*.parquet',
                  hive_partitioning = false, union_by_name = true, filename = true)
WHERE filename IN (SELECT file FROM export_files);

CREATE OR REPLACE VIEW turn_parts AS
SELECT * EXCLUDE (filename)
FROM read_parquet(rtrim(getvariable('parquet_root'), '/') || '/turn_parts/*.parquet',
                  hive_partitioning = false, filename = true)
WHERE filename IN (SELECT file FROM export_files);
