/* db.c — the SQLite layer behind db.h (no Lua here; see l_db.c).
 *
 * Modelled on pkg's pkgdb.c: every statement sits in one table indexed by an
 * enum, prepared once at open with SQLITE_PREPARE_PERSISTENT and finalized
 * at close; run_stmt() resets, binds a typed argument array by position
 * (?1..?N), steps and reports failures with sqlite3_errmsg and the expanded
 * SQL. Writes are BEGIN IMMEDIATE ... COMMIT (a SAVEPOINT when the caller
 * already has a transaction open), so a busy writer waits on the 5 s busy
 * timeout up front instead of failing half way.
 *
 * Test: tests/c/test_db.c.
 */
#include "db.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "embedded.h"

#define BUSY_TIMEOUT_MS 5000
#define NOW_SQL "strftime('%Y-%m-%dT%H:%M:%fZ', 'now')"

// ----------------------------------------------------------------------------
// statement table

enum stmt_id {
  ST_BEGIN,
  ST_COMMIT,
  ST_ROLLBACK,
  ST_SAVEPOINT,
  ST_RELEASE,
  ST_ROLLBACK_TO,
  ST_RUN_INSERT,
  ST_RUN_END,
  ST_RESULT_INSERT,
  ST_ERROR_INSERT,
  ST_LAST
};

struct vsa_db {
  sqlite3 *h;
  char *path;
  int readonly;
  int immutable; /* read-only, opened as file:PATH?immutable=1 (see vsa_db_open) */
  sqlite3_stmt *st[ST_LAST]; /* prepared at open, finalized at close */
};

static const char *const stmt_sql[ST_LAST] = {
  [ST_BEGIN] = "BEGIN IMMEDIATE",
  [ST_COMMIT] = "COMMIT",
  [ST_ROLLBACK] = "ROLLBACK",
  [ST_SAVEPOINT] = "SAVEPOINT vsa_write",
  [ST_RELEASE] = "RELEASE vsa_write",
  [ST_ROLLBACK_TO] = "ROLLBACK TO vsa_write",
  [ST_RUN_INSERT] =
    "INSERT INTO run (status, script, args, seed, host, pid, git_rev,"
    " vsalab_version, gpu_name, gpu_cc, sm_count, driver_version,"
    " runtime_version, device_index, context, cuda_visible_devices,"
    " nvcc_flags, dirty, uid, sweep_id, shard_index, shard_count, devices)"
    " VALUES ('running', ?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12,"
    " ?13, ?14, ?15, ?16, ?17, lower(hex(randomblob(16))), ?18, ?19, ?20,"
    " ?21)",
  [ST_RUN_END] =
    "UPDATE run SET status = ?2, error = ?3, ended_at = " NOW_SQL
    " WHERE id = ?1",
  [ST_RESULT_INSERT] =
    "INSERT INTO result (run_id, experiment, kernel, B, H, Sq, Skv, D, block,"
    " density, topk, ragged, pairs, ms_median, ms_min, ms_max, spread,"
    " samples, tflops, passed, note, extra, ms_p20, ms_p80, rel_stddev, mode,"
    " point_hash, samples_ms, sm_clock_start_mhz, sm_clock_end_mhz,"
    " throttled, gpu_index, gpu_name, gpu_uuid, layout)"
    " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14,"
    " ?15, ?16, ?17, ?18, ?19, ?20, ?21, ?22, ?23, ?24, ?25, ?26, ?27, ?28,"
    " ?29, ?30, ?31, ?32, ?33, ?34, coalesce(?35, 'bhsd'))",
  [ST_ERROR_INSERT] =
    "INSERT INTO result_error (result_id, output, rel_l2, max_abs, nonfinite,"
    " norm_ratio, passed) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
};

// ----------------------------------------------------------------------------
// typed arguments and errors

/* One positional argument; NULL-typed for unknown values. */
typedef struct {
  enum { ARG_NULL, ARG_INT, ARG_REAL, ARG_TEXT } type;
  union {
    int64_t i;
    double r;
    const char *s;
  } v;
} db_arg;

static db_arg
arg_int(int64_t i)
{
  db_arg a = {.type = i == VSA_DB_NULL ? ARG_NULL : ARG_INT, .v.i = i};
  return a;
}

static db_arg
arg_real(double r)
{
  db_arg a = {.type = isnan(r) ? ARG_NULL : ARG_REAL, .v.r = r};
  return a;
}

static db_arg
arg_text(const char *s)
{
  db_arg a = {.type = s ? ARG_TEXT : ARG_NULL, .v.s = s};
  return a;
}

/* A few words on what a failure code usually means, or "". */
static const char *
hint(int code)
{
  switch (code & 0xff) {
  case SQLITE_BUSY:
    return " (another connection holds the lock; busy timeout 5 s)";
  case SQLITE_READONLY:
    return " (the connection is read-only, or the file or its directory is"
           " not writable)";
  case SQLITE_CORRUPT:
    return " (the file is corrupt)";
  case SQLITE_FULL:
    return " (disk full)";
  default:
    return "";
  }
}

/* Record the connection's last error, with the statement's SQL (expanded with
 * its bound values when possible) or the given sql text. */
static int
fail_sqlite(vsa_db *db, sqlite3_stmt *st, const char *sql)
{
  int code = sqlite3_extended_errcode(db->h);
  char *msg = strdup(sqlite3_errmsg(db->h));
  char *expanded = st ? sqlite3_expanded_sql(st) : NULL;
  if (!sql) sql = st ? sqlite3_sql(st) : "?";
  vsa_fail("db '%s': %s%s in: %s", db->path, msg ? msg : "out of memory",
           hint(code), expanded ? expanded : sql);
  sqlite3_free(expanded);
  free(msg);
  return -1;
}

/* Reset st, bind args by position and step once. Returns the bind or step
 * code; the statement is reset again after SQLITE_DONE. */
static int
step_stmt(sqlite3_stmt *st, const db_arg *args, int nargs)
{
  sqlite3_reset(st);
  sqlite3_clear_bindings(st);
  for (int i = 0; i < nargs; i++) {
    int rc = SQLITE_OK;
    switch (args[i].type) {
    case ARG_NULL: rc = sqlite3_bind_null(st, i + 1); break;
    case ARG_INT: rc = sqlite3_bind_int64(st, i + 1, args[i].v.i); break;
    case ARG_REAL: rc = sqlite3_bind_double(st, i + 1, args[i].v.r); break;
    case ARG_TEXT:
      rc = sqlite3_bind_text(st, i + 1, args[i].v.s, -1, SQLITE_TRANSIENT);
      break;
    }
    if (rc != SQLITE_OK) return rc;
  }
  int rc = sqlite3_step(st);
  /* On an error the caller reads sqlite3_errmsg first, then resets. */
  if (rc == SQLITE_DONE) sqlite3_reset(st);
  return rc;
}

/* Run statement id to completion (it returns no rows); 0 or -1. */
static int
run_stmt(vsa_db *db, enum stmt_id id, const db_arg *args, int nargs)
{
  sqlite3_stmt *st = db->st[id];
  int rc = step_stmt(st, args, nargs);
  if (rc == SQLITE_DONE) return 0;
  if (rc == SQLITE_ROW) {
    sqlite3_reset(st);
    return vsa_fail("db '%s': statement returned rows: %s", db->path,
                    stmt_sql[id]);
  }
  fail_sqlite(db, st, NULL);
  sqlite3_reset(st);
  return -1;
}

/* Run one-off SQL (pragmas, the schema) with sqlite3_exec. */
static int
exec_sql(vsa_db *db, const char *sql)
{
  char *err = NULL;
  if (sqlite3_exec(db->h, sql, NULL, NULL, &err) == SQLITE_OK) return 0;
  int code = sqlite3_extended_errcode(db->h);
  vsa_fail("db '%s': %s%s in: %.300s", db->path, err ? err : "error",
           hint(code), sql);
  sqlite3_free(err);
  return -1;
}

/* The first column of the first row of a one-off query, as text copied
 * into buf. */
static int
query_text(vsa_db *db, const char *sql, char *buf, size_t n)
{
  sqlite3_stmt *st = NULL;
  if (sqlite3_prepare_v2(db->h, sql, -1, &st, NULL) != SQLITE_OK)
    return fail_sqlite(db, NULL, sql);
  int rc = sqlite3_step(st);
  if (rc != SQLITE_ROW) {
    if (rc == SQLITE_DONE)
      vsa_fail("db '%s': no row from: %s", db->path, sql);
    else
      fail_sqlite(db, NULL, sql);
    sqlite3_finalize(st);
    return -1;
  }
  const unsigned char *t = sqlite3_column_text(st, 0);
  snprintf(buf, n, "%s", t ? (const char *)t : "");
  sqlite3_finalize(st);
  return 0;
}

/* The schema version and the number of schema objects, read in one
 * statement so both come from the same snapshot: another process may be
 * creating the schema right now. */
static int
read_state(vsa_db *db, int64_t *version, int64_t *nobjects)
{
  static const char sql[] =
    "SELECT (SELECT user_version FROM pragma_user_version),"
    " (SELECT count(*) FROM sqlite_master)";
  sqlite3_stmt *st = NULL;
  if (sqlite3_prepare_v2(db->h, sql, -1, &st, NULL) != SQLITE_OK)
    return fail_sqlite(db, NULL, sql);
  if (sqlite3_step(st) != SQLITE_ROW) {
    fail_sqlite(db, NULL, sql);
    sqlite3_finalize(st);
    return -1;
  }
  *version = sqlite3_column_int64(st, 0);
  *nobjects = sqlite3_column_int64(st, 1);
  sqlite3_finalize(st);
  return 0;
}

// ----------------------------------------------------------------------------
// transactions

/* Begin a write: BEGIN IMMEDIATE, or a savepoint inside the caller's open
 * transaction. *nested says which, for tx_commit / tx_abort. */
static int
tx_begin(vsa_db *db, int *nested)
{
  *nested = !sqlite3_get_autocommit(db->h);
  return run_stmt(db, *nested ? ST_SAVEPOINT : ST_BEGIN, NULL, 0);
}

static int
tx_commit(vsa_db *db, int nested)
{
  return run_stmt(db, nested ? ST_RELEASE : ST_COMMIT, NULL, 0);
}

/* Undo the write; keeps the recorded error of whatever failed. */
static void
tx_abort(vsa_db *db, int nested)
{
  if (nested) {
    step_stmt(db->st[ST_ROLLBACK_TO], NULL, 0);
    sqlite3_reset(db->st[ST_ROLLBACK_TO]);
    step_stmt(db->st[ST_RELEASE], NULL, 0);
    sqlite3_reset(db->st[ST_RELEASE]);
  } else if (!sqlite3_get_autocommit(db->h)) {
    /* Some errors (SQLITE_FULL, IOERR, NOMEM) already rolled back. */
    step_stmt(db->st[ST_ROLLBACK], NULL, 0);
    sqlite3_reset(db->st[ST_ROLLBACK]);
  }
}

static int
check_writable(vsa_db *db, const char *what)
{
  if (!db) return vsa_fail("db: %s on a NULL db", what);
  if (db->readonly)
    return vsa_fail("db '%s': opened read-only, cannot %s", db->path, what);
  return 0;
}

// ----------------------------------------------------------------------------
// open, schema, close

const char *
vsa_db_schema_sql(void)
{
  for (const vsa_embedded_file *f = vsa_embedded; f->name; f++)
    if (strcmp(f->name, "schema") == 0 && f->kind &&
        strcmp(f->kind, "sql") == 0)
      return f->text;
  return NULL;
}

static int
check_version(vsa_db *db, int64_t version)
{
  if (version > VSA_DB_SCHEMA_VERSION)
    return vsa_fail("db '%s': schema version %lld is newer than this vsalab "
                    "supports (%d); use a newer vsalab or another file",
                    db->path, (long long)version, VSA_DB_SCHEMA_VERSION);
  /* Older versions are upgraded at open (read-only opens read them as
   * they are). */
  return 0;
}

/* The embedded upgrade to schema version v (db/upgrades/NNNN_*.sql). */
static const char *
upgrade_sql(int v)
{
  char name[32];
  snprintf(name, sizeof name, "upgrade_%04d", v);
  for (const vsa_embedded_file *f = vsa_embedded; f->name; f++)
    if (strcmp(f->name, name) == 0) return f->text;
  return NULL;
}

/* Inside an open transaction: apply the upgrades after version `from`, one
 * after the other, and set user_version. */
static int
apply_upgrades(vsa_db *db, int64_t from)
{
  for (int v = (int)from + 1; v <= VSA_DB_SCHEMA_VERSION; v++) {
    const char *sql = upgrade_sql(v);
    if (!sql)
      return vsa_fail("db '%s': this binary lacks the upgrade to schema "
                      "version %d (db/upgrades/)", db->path, v);
    VSA_TRY(exec_sql(db, sql));
  }
  char pragma[64];
  snprintf(pragma, sizeof pragma, "PRAGMA user_version = %d", VSA_DB_SCHEMA_VERSION);
  return exec_sql(db, pragma);
}

/* End a failed schema transaction, if one is open; returns -1. */
static int
rollback(vsa_db *db)
{
  if (!sqlite3_get_autocommit(db->h))
    sqlite3_exec(db->h, "ROLLBACK", NULL, NULL, NULL);
  return -1;
}

/* Bring an older database up to this build's schema, all or nothing. The
 * version is read again under the write lock: another process may have
 * upgraded it meanwhile. */
static int
upgrade(vsa_db *db)
{
  VSA_TRY(exec_sql(db, "BEGIN IMMEDIATE"));
  int64_t version = 0, nobjects = 0;
  if (read_state(db, &version, &nobjects)) goto fail;
  if (version < VSA_DB_SCHEMA_VERSION && apply_upgrades(db, version)) goto fail;
  if (exec_sql(db, "COMMIT")) goto fail;
  return 0;
fail:
  return rollback(db);
}

/* Create the schema on an empty database. Another process may be doing the
 * same: the version is read again under the write lock. */
static int
create_schema(vsa_db *db)
{
  const char *schema = vsa_db_schema_sql();
  if (!schema)
    return vsa_fail("db '%s': this binary has no embedded schema "
                    "(db/schema.sql)", db->path);
  VSA_TRY(exec_sql(db, "BEGIN IMMEDIATE"));
  int64_t version = 0, ntables = 0;
  if (read_state(db, &version, &ntables)) goto fail;
  if (version == 0 && ntables == 0) {
    /* schema.sql is version 1; the upgrades bring it to this build's. */
    if (exec_sql(db, schema) || apply_upgrades(db, 1)) goto fail;
  } else if (version == 0) {
    vsa_fail("db '%s': a SQLite database but not a vsalab one "
             "(user_version 0 and %lld schema objects)", db->path,
             (long long)ntables);
    goto fail;
  } else if (check_version(db, version)) {
    goto fail; /* created meanwhile by a different vsalab */
  }
  if (exec_sql(db, "COMMIT")) goto fail;
  return 0;
fail:
  return rollback(db);
}

/* The first read of the file. Refuses, before anything is written to it, a
 * file that is not a database, a SQLite database that is not a vsalab one,
 * a schema newer than this build and an empty database opened read-only. */
static int
probe(vsa_db *db, int64_t *version)
{
  int64_t ntables = 0;
  if (read_state(db, version, &ntables)) {
    int code = sqlite3_extended_errcode(db->h) & 0xff;
    if (code == SQLITE_NOTADB)
      return vsa_fail("db '%s': not a SQLite database (%s)", db->path,
                      sqlite3_errmsg(db->h));
    if (code == SQLITE_CORRUPT)
      return vsa_fail("db '%s': the database file is corrupt (%s)", db->path,
                      sqlite3_errmsg(db->h));
    return -1;
  }
  if (*version == 0 && ntables > 0)
    return vsa_fail("db '%s': a SQLite database but not a vsalab one "
                    "(user_version 0 and %lld schema objects)",
                    db->path, (long long)ntables);
  if (*version == 0 && db->readonly)
    return vsa_fail("db '%s': empty database (no vsalab schema) opened "
                    "read-only", db->path);
  return check_version(db, *version);
}

/* What SQLite is handed for db->path (malloc'd; NULL when out of memory):
 * immutable, the URI file:PATH?immutable=1 (PATH percent-encoded, an
 * absolute one after an empty authority: "file:" + "//x/t.db" would name
 * host x); else the path, where one that reads as a URI ("file:x.db?
 * mode=memory": this SQLite takes URIs by default) is a file name here,
 * for every command alike: "./file:x.db". */
static char *
connection_name(const vsa_db *db)
{
  const char *path = db->path;
  size_t n = strlen(path);
  char *name = malloc(3 * n + 32);
  if (!name) return NULL;
  if (!db->immutable) {
    sprintf(name, "%s%s", strncmp(path, "file:", 5) == 0 ? "./" : "", path);
    return name;
  }
  char *w = name + sprintf(name, path[0] == '/' ? "file://" : "file:");
  for (const unsigned char *c = (const unsigned char *)path; *c; c++)
    w += (*c == '%' || *c == '?' || *c == '#' || *c < 0x20) ? sprintf(w, "%%%02X", *c)
                                                             : (*w = (char)*c, 1);
  strcpy(w, "?immutable=1");
  return name;
}

/* The errno to report for a new file SQLite could not create at path: its
 * ENOENT is that of the read-only retry after the create failed. The
 * create is tried again for its own errno (EACCES, EROFS...); a file it
 * makes after all (O_EXCL: ours) is removed. */
static int
create_errno(const char *path, int sys)
{
  struct stat sb;
  if (sys != ENOENT || stat(path, &sb) == 0 || errno != ENOENT) return sys;
  int fd = open(path, O_RDWR | O_CREAT | O_EXCL, 0644);
  if (fd < 0) return errno;
  close(fd);
  unlink(path);
  return sys;
}

/* A read-only connection's statements stop at a signal: a query can scan
 * for minutes, and the host's interrupt is a Lua hook, which never runs
 * while SQLite does. Writers finish their statement (a row, the run's
 * closing) and stop at the next Lua instruction as before. */
static int
stop_on_signal(void *unused)
{
  (void)unused;
  return vsa_interrupt_flag != 0;
}

static int
open_connection(vsa_db *db)
{
  int flags = db->readonly ? SQLITE_OPEN_READONLY
                           : SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE;
  struct stat sb;
  if (db->readonly && strcmp(db->path, ":memory:") != 0 &&
      stat(db->path, &sb) != 0)
    return vsa_fail("db '%s': cannot open read-only: %s", db->path,
                    strerror(errno));
  char *name = connection_name(db);
  if (!name) return vsa_fail("db: out of memory");
  if (db->immutable) flags |= SQLITE_OPEN_URI;
  int rc = sqlite3_open_v2(name, &db->h, flags | SQLITE_OPEN_NOMUTEX, NULL);
  free(name);
  if (rc != SQLITE_OK) {
    int sys = db->h ? sqlite3_system_errno(db->h) : 0;
    if (!db->readonly) sys = create_errno(db->path, sys);
    vsa_fail("db '%s': cannot open: %s%s%s%s", db->path,
             db->h ? sqlite3_errmsg(db->h) : sqlite3_errstr(rc),
             sys ? " (" : "", sys ? strerror(sys) : "", sys ? ")" : "");
    return -1;
  }
  sqlite3_extended_result_codes(db->h, 1);
  sqlite3_busy_timeout(db->h, BUSY_TIMEOUT_MS);
  if (db->readonly) sqlite3_progress_handler(db->h, 10000, stop_on_signal, NULL);
  /* A write-protected file silently opens read-only; say so now rather than
   * at the first row of a long experiment. */
  if (!db->readonly && sqlite3_db_readonly(db->h, "main") == 1)
    return vsa_fail("db '%s': the file is read-only (check its permissions);"
                    " open it with readonly=true to read it", db->path);
  return 0;
}

/* WAL lets readers and one writer work at once across processes. The mode
 * is stored in the file, so usually there is nothing to do. Switching needs
 * an exclusive lock, and SQLite answers SQLITE_BUSY at once rather than wait
 * where waiting could deadlock (several processes opening one new file), so
 * retry for up to the busy timeout. ":memory:" stays "memory". */
static int
set_wal(vsa_db *db)
{
  char mode[32];
  VSA_TRY(query_text(db, "PRAGMA journal_mode", mode, sizeof mode));
  if (strcmp(mode, "wal") == 0 || strcmp(mode, "memory") == 0) return 0;
  for (int waited_ms = 0;; waited_ms += 10) {
    if (query_text(db, "PRAGMA journal_mode = WAL", mode, sizeof mode) == 0)
      return 0;
    if ((sqlite3_extended_errcode(db->h) & 0xff) != SQLITE_BUSY ||
        waited_ms >= BUSY_TIMEOUT_MS)
      return -1;
    sqlite3_sleep(10);
  }
}

static int
configure(vsa_db *db)
{
  /* Foreign keys are off by default in SQLite and per connection. */
  VSA_TRY(exec_sql(db, "PRAGMA foreign_keys = ON"));
  if (db->readonly) return 0;
  VSA_TRY(set_wal(db));
  return exec_sql(db, "PRAGMA synchronous = NORMAL");
}

static int
prepare_all(vsa_db *db)
{
  for (int i = 0; i < ST_LAST; i++)
    if (sqlite3_prepare_v3(db->h, stmt_sql[i], -1, SQLITE_PREPARE_PERSISTENT,
                           &db->st[i], NULL) != SQLITE_OK)
      return fail_sqlite(db, NULL, stmt_sql[i]);
  return 0;
}

/* Whether the file at path alone is the database: not ":memory:", and no
 * non-empty -wal or -journal file beside it, where SQLite keeps them (beside
 * the file a symbolic link names, not beside the link): a -journal is a
 * rollback-mode writer's, mid-transaction or killed in one, and the file
 * then holds its uncommitted pages (read as it stands: rows missing, others
 * changed). When one is pending and wal is not NULL, *wal gets its path
 * (malloc'd). */
static int
readable_as_is(const char *path, char **wal)
{
  if (strcmp(path, ":memory:") == 0) return 0;
  char *real = realpath(path, NULL);
  const char *file = real ? real : path;
  size_t n = strlen(file) + 9;
  char *log = malloc(n);
  int pending = !log;
  for (int i = 0; i < 2 && !pending; i++) {
    struct stat st;
    snprintf(log, n, "%s%s", file, i ? "-journal" : "-wal");
    pending = stat(log, &st) == 0 && st.st_size > 0;
  }
  free(real);
  if (pending && wal && log) *wal = log;
  else free(log);
  return !pending;
}

int
vsa_db_open(vsa_db **out, const char *path, int readonly)
{
  if (!out) return vsa_fail("db: vsa_db_open needs an out pointer");
  *out = NULL;
  if (!path || !*path) return vsa_fail("db: empty path");
  /* A device or FIFO is no database (SQLite would create "-journal" files
   * beside it): refuse anything that exists and is not a regular file. */
  struct stat st;
  if (stat(path, &st) == 0 && !S_ISREG(st.st_mode))
    return vsa_fail("db '%s': not a regular file", path);
  vsa_db *db = calloc(1, sizeof *db);
  if (!db || !(db->path = strdup(path))) {
    free(db);
    return vsa_fail("db: out of memory");
  }
  db->readonly = readonly != 0;
  db->immutable = readonly == VSA_DB_SNAPSHOT && readable_as_is(path, NULL);
  /* probe before configure: journal_mode=WAL is written into the file, and
   * a file we refuse must be left as it was. */
  int64_t version = 0;
  int bad = open_connection(db) || probe(db, &version);
  /* A WAL database read by someone who may not write its directory (a
   * teammate's results): SQLite cannot create the -shm file and refuses
   * even to read. With nothing pending the file alone is the database:
   * read it as immutable. */
  if (bad && db->readonly && !db->immutable && db->h) {
    int ext = sqlite3_extended_errcode(db->h), code = ext & 0xff;
    char *wal = NULL;
    if (ext == SQLITE_READONLY_ROLLBACK) {
      /* A hot journal: only a connection that may write can roll it back. */
      readable_as_is(path, &wal);
      vsa_fail("db '%s': a writer stopped in the middle of a transaction and left its "
               "rollback journal (%s): open the file once with write access to roll it back "
               "(sqlite3 '%s' 'PRAGMA user_version'), then read it", path,
               wal ? wal : "-journal", path);
    } else if ((code == SQLITE_READONLY || code == SQLITE_CANTOPEN) && readable_as_is(path, &wal)) {
      sqlite3_close_v2(db->h);
      db->h = NULL;
      db->immutable = 1;
      version = 0;
      bad = open_connection(db) || probe(db, &version);
    } else if (wal) {
      vsa_fail("db '%s': cannot read it without write access to its directory or filesystem: "
               "another writer's log (%s) is pending", path, wal);
    }
    free(wal);
  }
  if (bad || configure(db) ||
      (version == 0 && create_schema(db)) ||
      (!db->readonly && version > 0 && version < VSA_DB_SCHEMA_VERSION && upgrade(db)) ||
      (!db->readonly && prepare_all(db))) {
    vsa_db_close(db);
    return -1;
  }
  *out = db;
  return 0;
}

void
vsa_db_close(vsa_db *db)
{
  if (!db) return;
  for (int i = 0; i < ST_LAST; i++) sqlite3_finalize(db->st[i]);
  /* _v2: becomes a zombie until ad-hoc statements are finalized. */
  sqlite3_close_v2(db->h);
  free(db->path);
  free(db);
}

sqlite3 *
vsa_db_handle(vsa_db *db)
{
  return db ? db->h : NULL;
}

const char *
vsa_db_path(const vsa_db *db)
{
  return db ? db->path : NULL;
}

int
vsa_db_readonly(const vsa_db *db)
{
  return db ? db->readonly : 0;
}

// ----------------------------------------------------------------------------
// runs and results

void
vsa_db_run_info_init(vsa_run_info *info)
{
  memset(info, 0, sizeof *info);
  info->seed = info->pid = info->sm_count = info->device_index = VSA_DB_NULL;
  info->dirty = VSA_DB_NULL;
  info->shard_index = info->shard_count = VSA_DB_NULL;
}

void
vsa_db_result_init(vsa_result_row *row)
{
  memset(row, 0, sizeof *row);
  row->run_id = VSA_DB_NULL;
  row->B = row->H = row->Sq = row->Skv = row->D = row->block = VSA_DB_NULL;
  row->topk = row->ragged = row->pairs = row->samples = VSA_DB_NULL;
  row->passed = VSA_DB_NULL;
  row->density = row->ms_median = row->ms_min = row->ms_max = NAN;
  row->spread = row->tflops = NAN;
  row->ms_p20 = row->ms_p80 = row->rel_stddev = NAN;
  row->sm_clock_start_mhz = row->sm_clock_end_mhz = NAN;
  row->throttled = VSA_DB_NULL;
  row->gpu_index = VSA_DB_NULL;
}

void
vsa_db_error_init(vsa_result_error *err)
{
  memset(err, 0, sizeof *err);
  err->rel_l2 = err->max_abs = err->norm_ratio = NAN;
  err->nonfinite = err->passed = VSA_DB_NULL;
}

int
vsa_db_run_begin(vsa_db *db, const vsa_run_info *info, int64_t *run_id)
{
  VSA_TRY(check_writable(db, "begin a run"));
  if (!info) return vsa_fail("db '%s': run_begin without run info", db->path);
  db_arg a[] = {
    arg_text(info->script),         arg_text(info->args),
    arg_int(info->seed),            arg_text(info->host),
    arg_int(info->pid),             arg_text(info->git_rev),
    arg_text(info->vsalab_version), arg_text(info->gpu_name),
    arg_text(info->gpu_cc),         arg_int(info->sm_count),
    arg_text(info->driver_version), arg_text(info->runtime_version),
    arg_int(info->device_index),    arg_text(info->context),
    arg_text(info->cuda_visible_devices), arg_text(info->nvcc_flags),
    arg_int(info->dirty),           arg_text(info->sweep_id),
    arg_int(info->shard_index),     arg_int(info->shard_count),
    arg_text(info->devices),
  };
  int nested;
  VSA_TRY(tx_begin(db, &nested));
  if (run_stmt(db, ST_RUN_INSERT, a, (int)(sizeof a / sizeof a[0]))) goto fail;
  int64_t id = sqlite3_last_insert_rowid(db->h);
  if (tx_commit(db, nested)) goto fail;
  if (run_id) *run_id = id;
  return 0;
fail:
  tx_abort(db, nested);
  return -1;
}

int
vsa_db_run_end(vsa_db *db, int64_t run_id, const char *status,
               const char *error)
{
  VSA_TRY(check_writable(db, "end a run"));
  if (!status || (strcmp(status, "finished") && strcmp(status, "failed") &&
                  strcmp(status, "interrupted")))
    return vsa_fail("db '%s': run status must be 'finished', 'failed' or "
                    "'interrupted', not '%s'", db->path,
                    status ? status : "(null)");
  db_arg a[] = {arg_int(run_id), arg_text(status), arg_text(error)};
  int nested;
  VSA_TRY(tx_begin(db, &nested));
  if (run_stmt(db, ST_RUN_END, a, 3)) goto fail;
  if (sqlite3_changes(db->h) != 1) {
    vsa_fail("db '%s': no run with id %lld", db->path, (long long)run_id);
    goto fail;
  }
  if (tx_commit(db, nested)) goto fail;
  return 0;
fail:
  tx_abort(db, nested);
  return -1;
}

int
vsa_db_result_add(vsa_db *db, const vsa_result_row *row,
                  const vsa_result_error *errs, int nerrs, int64_t *result_id)
{
  VSA_TRY(check_writable(db, "add a result"));
  if (!row) return vsa_fail("db '%s': result_add without a row", db->path);
  if (row->run_id == VSA_DB_NULL)
    return vsa_fail("db '%s': result row has no run_id", db->path);
  if (!row->experiment || !row->kernel)
    return vsa_fail("db '%s': result row needs experiment and kernel",
                    db->path);
  if (nerrs < 0 || (nerrs > 0 && !errs))
    return vsa_fail("db '%s': bad error rows (%d)", db->path, nerrs);
  for (int i = 0; i < nerrs; i++)
    if (!errs[i].output || !*errs[i].output)
      return vsa_fail("db '%s': error row %d has no output name", db->path, i);

  db_arg a[] = {
    arg_int(row->run_id),     arg_text(row->experiment),
    arg_text(row->kernel),    arg_int(row->B),
    arg_int(row->H),          arg_int(row->Sq),
    arg_int(row->Skv),        arg_int(row->D),
    arg_int(row->block),      arg_real(row->density),
    arg_int(row->topk),       arg_int(row->ragged),
    arg_int(row->pairs),      arg_real(row->ms_median),
    arg_real(row->ms_min),    arg_real(row->ms_max),
    arg_real(row->spread),    arg_int(row->samples),
    arg_real(row->tflops),    arg_int(row->passed),
    arg_text(row->note),      arg_text(row->extra),
    arg_real(row->ms_p20),    arg_real(row->ms_p80),
    arg_real(row->rel_stddev), arg_text(row->mode),
    arg_text(row->point_hash), arg_text(row->samples_ms),
    arg_real(row->sm_clock_start_mhz), arg_real(row->sm_clock_end_mhz),
    arg_int(row->throttled),  arg_int(row->gpu_index),
    arg_text(row->gpu_name),  arg_text(row->gpu_uuid),
    arg_text(row->layout),
  };
  int nested;
  VSA_TRY(tx_begin(db, &nested));
  if (run_stmt(db, ST_RESULT_INSERT, a, (int)(sizeof a / sizeof a[0])))
    goto fail;
  int64_t id = sqlite3_last_insert_rowid(db->h);
  for (int i = 0; i < nerrs; i++) {
    const vsa_result_error *e = &errs[i];
    db_arg b[] = {
      arg_int(id),           arg_text(e->output),  arg_real(e->rel_l2),
      arg_real(e->max_abs),  arg_int(e->nonfinite), arg_real(e->norm_ratio),
      arg_int(e->passed),
    };
    if (run_stmt(db, ST_ERROR_INSERT, b, (int)(sizeof b / sizeof b[0])))
      goto fail;
  }
  if (tx_commit(db, nested)) goto fail;
  if (result_id) *result_id = id;
  return 0;
fail:
  tx_abort(db, nested);
  return -1;
}
