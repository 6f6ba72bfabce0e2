-- 0004_block.sql — schema version 3 -> 4: the block size is an axis (64 or
-- 128 tokens per q block and kv block; issue "128-token blocks end to end").
-- Run by vsa_db_open (src/storage/db.c) inside the upgrade transaction that also
-- sets PRAGMA user_version = 4; a new database gets schema.sql and then
-- every upgrade in order, so both paths end with the same tables.
--
-- result.block existed since version 1 and the experiments wrote 64 there,
-- but nothing required it: every row measured before block sizes other
-- than 64 existed was measured at 64, so a row without one reads as 64.
UPDATE result SET block = 64 WHERE block IS NULL;
