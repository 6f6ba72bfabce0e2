-- 0002_measurement.sql — schema version 1 -> 2: what a trustworthy
-- measurement records (issue "measurements you can trust and compare").
-- Run by vsa_db_open (src/storage/db.c) inside the upgrade transaction that also
-- sets PRAGMA user_version = 2; a new database gets schema.sql and then
-- every upgrade in order, so both paths end with the same tables.

-- Per run: the invocation's context and the build.
ALTER TABLE run ADD COLUMN context TEXT         -- --context key=value pairs, JSON object
  CONSTRAINT context_is_json CHECK (context IS NULL OR json_valid(context));
ALTER TABLE run ADD COLUMN cuda_visible_devices TEXT;
ALTER TABLE run ADD COLUMN nvcc_flags TEXT;      -- flags the kernels were built with
ALTER TABLE run ADD COLUMN dirty INTEGER CHECK (dirty IN (0, 1)); -- built from a dirty tree

-- Per result: the distribution, the mode, the point and the clocks.
ALTER TABLE result ADD COLUMN ms_p20 REAL CHECK (ms_p20 >= 0);
ALTER TABLE result ADD COLUMN ms_p80 REAL CHECK (ms_p80 >= 0);
ALTER TABLE result ADD COLUMN rel_stddev REAL CHECK (rel_stddev >= 0);
ALTER TABLE result ADD COLUMN mode TEXT;        -- 'hot', 'cold', 'graph'
ALTER TABLE result ADD COLUMN point_hash TEXT;  -- stable hash of the sweep point
ALTER TABLE result ADD COLUMN samples_ms TEXT   -- raw samples (JSON array), on request
  CONSTRAINT samples_is_json CHECK (samples_ms IS NULL OR json_valid(samples_ms));
ALTER TABLE result ADD COLUMN sm_clock_start_mhz REAL;
ALTER TABLE result ADD COLUMN sm_clock_end_mhz REAL;
ALTER TABLE result ADD COLUMN throttled INTEGER CHECK (throttled IN (0, 1));

CREATE INDEX result_point_hash ON result (point_hash);
