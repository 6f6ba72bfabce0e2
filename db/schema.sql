-- schema.sql — the vsalab results database, schema version 1.
--
-- Embedded into the binary at build time (cmake/embed.cmake, entry "schema",
-- kind "sql") and run by vsa_db_open() (src/storage/db.c) on an empty database inside
-- one BEGIN IMMEDIATE transaction that also sets PRAGMA user_version = 1.
-- So this file holds no PRAGMA and no BEGIN/COMMIT. A change to it is a new
-- schema version: bump VSA_DB_SCHEMA_VERSION in src/storage/db.h and add the step
-- from the previous version under db/upgrades/.
--
-- Conventions: tables singular, lowercase, STRICT. Times are UTC ISO-8601
-- text with milliseconds ("2025-01-31T12:34:56.789Z"). A NULL means "not
-- known" or "not measured" (a NaN from C or Lua is stored as NULL). Flags are
-- INTEGER 0/1. JSON columns are TEXT checked with json_valid().
--
-- Query examples:
--   SELECT id, status, started_at, gpu_name, script FROM run ORDER BY id DESC;
--   SELECT kernel, Skv, topk, ms_median, tflops, worst_output, worst_rel_l2
--     FROM result_summary WHERE run_id = 7 ORDER BY kernel, Skv;

-- One invocation of an experiment script: the environment it ran in and how
-- it ended. A run that dies stays 'running' with ended_at NULL, and keeps
-- every result row committed before it died.
CREATE TABLE run (
  id              INTEGER PRIMARY KEY,
  started_at      TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
  ended_at        TEXT,                 -- NULL while running or after a crash
  status          TEXT NOT NULL DEFAULT 'running'
                  CHECK (status IN ('running', 'finished', 'failed', 'interrupted')),
  script          TEXT,                 -- script path as given; NULL for the REPL
  args            TEXT                  -- the script's arguments, a JSON array
                  CONSTRAINT args_is_json_array
                  CHECK (args IS NULL OR CASE WHEN json_valid(args)
                                              THEN json_type(args) = 'array'
                                              ELSE 0 END),
  seed            INTEGER,
  host            TEXT,
  pid             INTEGER,
  git_rev         TEXT,                 -- project revision, "-dirty" suffix if so
  vsalab_version  TEXT,
  gpu_name        TEXT,                 -- e.g. "NVIDIA H200"
  gpu_cc          TEXT,                 -- compute capability, e.g. "9.0"
  sm_count        INTEGER CHECK (sm_count > 0),
  driver_version  TEXT,                 -- e.g. "12.8"
  runtime_version TEXT,                 -- CUDA runtime, e.g. "12.8"
  device_index    INTEGER CHECK (device_index >= 0),
  error           TEXT,                 -- why it failed / was interrupted
  CONSTRAINT ended_at_iff_not_running
  CHECK ((status = 'running') = (ended_at IS NULL))
) STRICT;

-- One measured configuration. Shapes: B batch, H heads, Sq / Skv query and
-- key/value sequence lengths, D head dim; block is the sparse block size,
-- density the fraction of (q block, kv block) pairs selected, topk the kv
-- blocks per q block, ragged 1 when the per-row count varies in [0, topk],
-- pairs the number of selected (q block, kv block) pairs.
CREATE TABLE result (
  id          INTEGER PRIMARY KEY,
  run_id      INTEGER NOT NULL REFERENCES run (id) ON DELETE CASCADE,
  created_at  TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
  experiment  TEXT NOT NULL,
  kernel      TEXT NOT NULL,
  B           INTEGER CHECK (B > 0),
  H           INTEGER CHECK (H > 0),
  Sq          INTEGER CHECK (Sq > 0),
  Skv         INTEGER CHECK (Skv > 0),
  D           INTEGER CHECK (D > 0),
  block       INTEGER CHECK (block > 0),
  density     REAL    CHECK (density >= 0 AND density <= 1),
  topk        INTEGER CHECK (topk >= 0),
  ragged      INTEGER CHECK (ragged IN (0, 1)),
  pairs       INTEGER CHECK (pairs >= 0),
  ms_median   REAL    CHECK (ms_median >= 0),   -- milliseconds per call
  ms_min      REAL    CHECK (ms_min >= 0),
  ms_max      REAL    CHECK (ms_max >= 0),
  spread      REAL    CHECK (spread >= 0),      -- (ms_max - ms_min) / ms_median
  samples     INTEGER CHECK (samples >= 0),     -- timed calls behind the stats
  tflops      REAL    CHECK (tflops >= 0),      -- 1e12 FLOP/s at ms_median
  passed      INTEGER CHECK (passed IN (0, 1)), -- NULL: not checked
  note        TEXT,
  extra       TEXT                              -- free-form JSON
              CONSTRAINT extra_is_json CHECK (extra IS NULL OR json_valid(extra))
) STRICT;

CREATE INDEX result_run_id ON result (run_id);
CREATE INDEX result_experiment_kernel ON result (experiment, kernel);

-- Error metrics of one output of a result (e.g. 'dq', 'dk', 'dv') against its
-- reference. rel_l2 = |x - ref|_2 / |ref|_2, max_abs = max |x - ref|,
-- nonfinite = count of NaN/Inf in x, norm_ratio = |x|_2 / |ref|_2.
CREATE TABLE result_error (
  result_id   INTEGER NOT NULL REFERENCES result (id) ON DELETE CASCADE,
  output      TEXT NOT NULL CHECK (output <> ''),
  rel_l2      REAL CHECK (rel_l2 >= 0),
  max_abs     REAL CHECK (max_abs >= 0),
  nonfinite   INTEGER CHECK (nonfinite >= 0),
  norm_ratio  REAL CHECK (norm_ratio >= 0),
  passed      INTEGER CHECK (passed IN (0, 1)),
  PRIMARY KEY (result_id, output)
) STRICT, WITHOUT ROWID;

-- Each result with its worst output: one with non-finite values first, then
-- the largest rel_l2 (unknown rel_l2 last). Results without error rows get
-- NULLs. n_outputs / n_failed / nonfinite aggregate over all its outputs.
CREATE VIEW result_summary AS
SELECT r.*,
       w.output     AS worst_output,
       w.rel_l2     AS worst_rel_l2,
       w.max_abs    AS worst_max_abs,
       w.norm_ratio AS worst_norm_ratio,
       (SELECT count(*) FROM result_error e WHERE e.result_id = r.id)
                    AS n_outputs,
       (SELECT count(*) FROM result_error e
         WHERE e.result_id = r.id AND e.passed = 0)
                    AS n_failed,
       (SELECT sum(e.nonfinite) FROM result_error e WHERE e.result_id = r.id)
                    AS nonfinite
  FROM result r
  LEFT JOIN result_error w
    ON w.result_id = r.id
   AND w.output = (SELECT x.output FROM result_error x
                    WHERE x.result_id = r.id
                    ORDER BY coalesce(x.nonfinite, 0) > 0 DESC,
                             x.rel_l2 DESC NULLS LAST, x.output
                    LIMIT 1);
