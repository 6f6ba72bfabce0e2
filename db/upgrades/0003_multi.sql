-- 0003_multi.sql — schema version 2 -> 3: sweeps beyond one GPU (issue
-- "every GPU of a host, and a real cluster through Slurm").
-- Run by vsa_db_open (src/storage/db.c) inside the upgrade transaction that also
-- sets PRAGMA user_version = 3; a new database gets schema.sql and then
-- every upgrade in order, so both paths end with the same tables.

-- Per run: an identity that survives copying between files (what `vsalab
-- merge` recognises a run by, so merging a file twice adds nothing), the
-- logical sweep it belongs to and its slice, the GPUs of a --devices run,
-- and where a merged run came from.
ALTER TABLE run ADD COLUMN uid TEXT;             -- 32 hex digits, set at insert
UPDATE run SET uid = lower(hex(randomblob(16))) WHERE uid IS NULL;
CREATE UNIQUE INDEX run_uid ON run (uid);
ALTER TABLE run ADD COLUMN sweep_id TEXT;        -- shared by every shard of one sweep
ALTER TABLE run ADD COLUMN shard_index INTEGER CHECK (shard_index >= 0);
ALTER TABLE run ADD COLUMN shard_count INTEGER CHECK (shard_count >= 1);
ALTER TABLE run ADD COLUMN devices TEXT          -- --devices: [{index, name, uuid}...], JSON
  CONSTRAINT devices_is_json CHECK (devices IS NULL OR json_valid(devices));
ALTER TABLE run ADD COLUMN source_db TEXT;       -- merge: the file the run came from
ALTER TABLE run ADD COLUMN source_run_id INTEGER; -- merge: its id there
ALTER TABLE run ADD COLUMN merged_at TEXT;       -- merge: when (UTC ISO-8601)
CREATE INDEX run_sweep_id ON run (sweep_id);

-- Per result: the GPU that measured it.
ALTER TABLE result ADD COLUMN gpu_index INTEGER CHECK (gpu_index >= 0); -- ordinal on its host
ALTER TABLE result ADD COLUMN gpu_name TEXT;     -- e.g. "NVIDIA H200"
ALTER TABLE result ADD COLUMN gpu_uuid TEXT;     -- "GPU-xxxxxxxx-...", as nvidia-smi -L prints it
