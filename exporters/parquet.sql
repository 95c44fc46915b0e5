-- Open a Parquet export (agentnb export --to parquet:DIR) in the DuckDB CLI as raw_events.
-- Parameters:
--   parquet_root  required  VARCHAR  the export folder (the one holding events/ and _manifest/)
-- Usage:
--   duckdb -c "SET VARIABLE parquet_root = 'exports/agentnb'" \
--          -c ".read exporters/parquet.sql" -c ".read exporters/schema.sql" \
--          -c ".read exporters/queries/slowest_tools.sql"
-- Globs every data file; a file a crash left outside the manifest only repeats rows, so this
-- keeps each event_id once. (agentnb.analysis reads exactly the manifest's files, which hold
-- every event once, so it needs no such step.)
CREATE OR REPLACE VIEW raw_events AS
SELECT DISTINCT ON (event_id) *, CAST(occurred_at AT TIME ZONE 'UTC' AS DATE) AS event_date
FROM read_parquet(getvariable('parquet_root') || '/events/*/*.parquet', hive_partitioning = false, union_by_name = true);
