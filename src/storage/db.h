/* db.h — the results database: runs and measured results in SQLite.
 *
 * Plain C, no Lua (the binding is l_db.c). The schema is db/schema.sql,
 * embedded into the binary; its version lives in PRAGMA user_version.
 * Every function returns 0 on success or -1 after recording a message with
 * vsa_fail() (check.h); messages start with "db '<path>':" and, for SQLite
 * failures, include sqlite3_errmsg and the SQL of the failing statement.
 *
 * Durability: each write (a run row, a result row with its error rows) is its
 * own transaction, committed before the function returns. A process that
 * dies keeps every finished row; its run stays status 'running' with
 * ended_at NULL. Connections use WAL and a 5 s busy timeout, so several
 * processes can log into one file.
 *
 * Unknown values: an integer field set to VSA_DB_NULL, a double that is NaN
 * and a NULL string are stored as SQL NULL. Start from
 * vsa_db_run_info_init() / vsa_db_result_init() / vsa_db_error_init(), which
 * set every field to unknown, and fill in what is known.
 *
 * Test: tests/c/test_db.c (build line in its header).
 */
#ifndef VSA_DB_H
#define VSA_DB_H

#include <stdint.h>

#include <sqlite3.h>

/* The schema version this build creates and understands. */
#define VSA_DB_SCHEMA_VERSION 5

/* An integer field holding this is stored as NULL (unknown). */
#define VSA_DB_NULL INT64_MIN

typedef struct vsa_db vsa_db;

/* The environment of one run (table run). Strings may be NULL. */
typedef struct {
  const char *script;          /* experiment script path; NULL for the REPL */
  const char *args;            /* the script's arguments as a JSON array */
  int64_t seed;                /* RNG seed of the run */
  const char *host;            /* host name */
  int64_t pid;                 /* process id */
  const char *git_rev;         /* project revision ("abc123-dirty") */
  const char *vsalab_version;  /* e.g. "0.1.0" */
  const char *gpu_name;        /* e.g. "NVIDIA H200" */
  const char *gpu_cc;          /* compute capability, e.g. "9.0" */
  int64_t sm_count;            /* streaming multiprocessors */
  const char *driver_version;  /* CUDA driver, e.g. "12.8" */
  const char *runtime_version; /* CUDA runtime, e.g. "12.8" */
  int64_t device_index;        /* CUDA ordinal used */
  const char *context;         /* --context pairs as a JSON object (v2) */
  const char *cuda_visible_devices; /* the environment variable (v2) */
  const char *nvcc_flags;      /* flags the kernels were built with (v2) */
  int64_t dirty;               /* 1: built from a dirty tree (v2) */
  const char *sweep_id;        /* logical sweep shared by its shards (v3) */
  int64_t shard_index;         /* --shard I/N: I in [0, N) (v3) */
  int64_t shard_count;         /* --shard I/N: N (v3) */
  const char *devices;         /* --devices: JSON [{index, name, uuid}] (v3) */
} vsa_run_info;

/* One measured configuration (table result). experiment and kernel are
 * required; everything else may be unknown. */
typedef struct {
  int64_t run_id;          /* from vsa_db_run_begin */
  const char *experiment;  /* e.g. "wan720p" */
  const char *kernel;      /* e.g. "bsa_bwd_fast" */
  int64_t B, H, Sq, Skv, D; /* batch, heads, q / kv length, head dim */
  int64_t block;           /* sparse block size (tokens) */
  double density;          /* selected fraction of block pairs, in [0, 1] */
  int64_t topk;            /* kv blocks per q block */
  int64_t ragged;          /* 1: per-row count varies in [0, topk]; 0: fixed */
  int64_t pairs;           /* selected (q block, kv block) pairs */
  double ms_median;        /* milliseconds per call */
  double ms_min, ms_max;   /* milliseconds */
  double spread;           /* (ms_max - ms_min) / ms_median */
  int64_t samples;         /* timed calls behind the stats */
  double tflops;           /* TFLOPS (1e12 FLOP/s) at ms_median */
  int64_t passed;          /* 1 / 0, VSA_DB_NULL when not checked */
  const char *note;        /* free text */
  const char *extra;       /* free-form JSON text (must be valid JSON) */
  double ms_p20, ms_p80;   /* 20th / 80th percentile, ms (v2) */
  double rel_stddev;       /* sample stddev / mean (v2) */
  const char *mode;        /* timing mode: 'hot', 'cold', 'graph', 'sustained' */
  const char *point_hash;  /* stable hash of the sweep point (v2) */
  const char *samples_ms;  /* raw samples as a JSON array, or NULL (v2) */
  double sm_clock_start_mhz, sm_clock_end_mhz; /* around the point (v2) */
  int64_t throttled;       /* 1: clocks dropped during the point (v2) */
  int64_t gpu_index;       /* CUDA ordinal of the GPU on its host (v3) */
  const char *gpu_name;    /* e.g. "NVIDIA H200" (v3) */
  const char *gpu_uuid;    /* "GPU-xxxxxxxx-...", as nvidia-smi -L (v3) */
  const char *layout;      /* 'bhsd' or 'bshd'; NULL stores 'bhsd' (v5) */
} vsa_result_row;

/* Error metrics of one output of a result (table result_error). */
typedef struct {
  const char *output;  /* output name, e.g. "dq"; required, unique per row */
  double rel_l2;       /* |x - ref|_2 / |ref|_2 */
  double max_abs;      /* max |x - ref| */
  int64_t nonfinite;   /* NaN/Inf count in x */
  double norm_ratio;   /* |x|_2 / |ref|_2 */
  int64_t passed;      /* 1 / 0, VSA_DB_NULL when not checked */
} vsa_result_error;

/* Set every field to unknown (NULL strings, VSA_DB_NULL, NaN). */
void vsa_db_run_info_init(vsa_run_info *info);
void vsa_db_result_init(vsa_result_row *row);
void vsa_db_error_init(vsa_result_error *err);

/* The embedded schema text (db/schema.sql, entry "schema" of kind "sql" in
 * vsa_embedded[], embedded.h), or NULL if this binary lacks it. */
const char *vsa_db_schema_sql(void);

/* Open (readonly = 0: create if missing) the database at path and set *out.
 * An empty file gets the schema and user_version VSA_DB_SCHEMA_VERSION.
 * Connection: foreign_keys=ON, busy_timeout 5000 ms and, unless readonly,
 * journal_mode=WAL and synchronous=NORMAL. Fails, with a message saying
 * which, for: a file that cannot be opened (with the OS reason), a missing
 * file opened readonly, a file that is not a SQLite database or is corrupt,
 * a SQLite database that is not a vsalab one, a schema version newer than
 * this build, a database locked for more than 5 s, and a file that is
 * read-only on disk when readonly = 0 (open it readonly to read it).
 * On failure *out is NULL. */
int vsa_db_open(vsa_db **out, const char *path, int readonly);
/* readonly = VSA_DB_SNAPSHOT: a finished database (a shard to merge) read
 * as it stands: opened immutable (no locks, no -shm or -wal files made
 * beside it, which a shared filesystem handles badly) unless a writer's
 * log is pending beside it, then as readonly = 1. */
#define VSA_DB_SNAPSHOT 2

/* Finalize the statements and close. NULL is a no-op. Ad-hoc statements the
 * caller prepared on vsa_db_handle() keep the connection alive until they
 * are finalized. */
void vsa_db_close(vsa_db *db);

/* Insert a run row with status 'running' and started_at now (UTC), committed
 * before returning; *run_id gets its id. Fails on a read-only connection. */
int vsa_db_run_begin(vsa_db *db, const vsa_run_info *info, int64_t *run_id);

/* Mark a run ended: status one of "finished", "failed", "interrupted";
 * error (may be NULL) says why; ended_at is set to now. Fails if there is no
 * such run or the status is not one of those. */
int vsa_db_run_end(vsa_db *db, int64_t run_id, const char *status,
                   const char *error);

/* Insert a result row and its nerrs error rows in one transaction, committed
 * before returning (a savepoint instead if the caller has a transaction
 * open on this connection); on failure nothing of it is kept. result_id may
 * be NULL. Fails for a missing run, a missing experiment/kernel/output, two
 * errors with the same output, and values outside the schema's CHECKs. */
int vsa_db_result_add(vsa_db *db, const vsa_result_row *row,
                      const vsa_result_error *errs, int nerrs,
                      int64_t *result_id);

/* The SQLite connection, for ad-hoc queries (do not close it). */
sqlite3 *vsa_db_handle(vsa_db *db);
/* The path given to vsa_db_open. */
const char *vsa_db_path(const vsa_db *db);
/* 1 if opened read-only. */
int vsa_db_readonly(const vsa_db *db);

#endif
