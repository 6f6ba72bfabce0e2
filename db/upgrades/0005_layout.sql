-- 0005_layout.sql — schema version 4 -> 5: the token layout is an axis
-- ('bhsd' [B,H,S,D] or 'bshd' [B,S,H,D] for q, k, v, o, dO and the
-- gradients; src/core/bsa.h, vsa_layout).
-- Run by vsa_db_open (src/storage/db.c) inside the upgrade transaction that also
-- sets PRAGMA user_version = 5; a new database gets schema.sql and then
-- every upgrade in order, so both paths end with the same tables.
--
-- Every row measured before the axis existed was measured in bhsd: the
-- default gives them 'bhsd' without rewriting a page (no index, as 0004:
-- a fresh DB's first writes stay small).
ALTER TABLE result ADD COLUMN layout TEXT NOT NULL DEFAULT 'bhsd'
  CHECK (layout IN ('bhsd', 'bshd'));
