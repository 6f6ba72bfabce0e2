/* test_db.c — checks for the SQLite layer (src/storage/db.c), no GPU needed.
 *
 * Build and run from the repository root:
 *   gcc -std=c11 -D_GNU_SOURCE -Wall -Wextra -O2 -I src/core -I src/storage \
 *       -I/usr/local/cuda/include tests/c/test_db.c src/storage/db.c src/core/check.c \
 *       /usr/lib/x86_64-linux-gnu/libsqlite3.a -L/usr/local/cuda/lib64 \
 *       -lcudart_static -lrt -lm -ldl -lpthread -o /tmp/test_db
 *   /tmp/test_db db/schema.sql
 *
 * The schema is read from argv[1] at run time into the stub vsa_embedded[]
 * below (the real build generates embedded.c from the db/ SQL files; a test
 * linked against vsa_core still uses this stub, since the archive's
 * embedded.o is then never pulled in). Prints one line per check, then
 * "N passed, M failed"; exits non-zero on any failure. Works in a fresh
 * mkdtemp directory, removed when every check passed. Needs fork(); run as
 * root it drops to uid 65534 in a child for the write-protected-file check.
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "db.h"
#include "embedded.h"

// ----------------------------------------------------------------------------
// stub of the generated embedded.c: the schema comes from argv[1]

static char schema_text[256 * 1024];
static char upgrade2_text[64 * 1024];
static char upgrade3_text[64 * 1024];
static char upgrade4_text[64 * 1024];
static char upgrade5_text[64 * 1024];

const vsa_embedded_file vsa_embedded[] = {
  {"schema", "sql", "@db/schema.sql", sizeof schema_text, schema_text},
  {"upgrade_0002", "sql", "@db/upgrades/0002_measurement.sql",
   sizeof upgrade2_text, upgrade2_text},
  {"upgrade_0003", "sql", "@db/upgrades/0003_multi.sql",
   sizeof upgrade3_text, upgrade3_text},
  {"upgrade_0004", "sql", "@db/upgrades/0004_block.sql",
   sizeof upgrade4_text, upgrade4_text},
  {"upgrade_0005", "sql", "@db/upgrades/0005_layout.sql",
   sizeof upgrade5_text, upgrade5_text},
  {NULL, NULL, NULL, 0, NULL},
};

static int
load_file(const char *path, char *schema_text, size_t cap)
{
  FILE *f = fopen(path, "rb");
  if (!f) {
    fprintf(stderr, "test_db: cannot read %s: %s\n", path, strerror(errno));
    return -1;
  }
  size_t n = fread(schema_text, 1, cap - 1, f);
  int too_big = !feof(f);
  fclose(f);
  if (too_big || n == 0) {
    fprintf(stderr, "test_db: %s is empty or too large\n", path);
    return -1;
  }
  schema_text[n] = '\0';
  return 0;
}

/* db/schema.sql and the db/upgrades/ beside it. */
static int
load_schema(const char *path)
{
  char up2[4096], up3[4096], up4[4096], up5[4096];
  const char *slash = strrchr(path, '/');
  int dir = slash ? (int)(slash - path) : 0;
  snprintf(up2, sizeof up2, "%.*s%supgrades/0002_measurement.sql", dir, path,
           slash ? "/" : "");
  snprintf(up3, sizeof up3, "%.*s%supgrades/0003_multi.sql", dir, path,
           slash ? "/" : "");
  snprintf(up4, sizeof up4, "%.*s%supgrades/0004_block.sql", dir, path,
           slash ? "/" : "");
  snprintf(up5, sizeof up5, "%.*s%supgrades/0005_layout.sql", dir, path,
           slash ? "/" : "");
  if (load_file(path, schema_text, sizeof schema_text)) return -1;
  if (load_file(up2, upgrade2_text, sizeof upgrade2_text)) return -1;
  if (load_file(up3, upgrade3_text, sizeof upgrade3_text)) return -1;
  if (load_file(up4, upgrade4_text, sizeof upgrade4_text)) return -1;
  return load_file(up5, upgrade5_text, sizeof upgrade5_text);
}

// ----------------------------------------------------------------------------
// reporting and helpers

static int npassed, nfailed;
static char dir[] = "/tmp/vsa_test_db.XXXXXX";

static void
check(int ok, const char *name, const char *fmt, ...)
{
  if (ok) {
    npassed++;
    printf("ok   %s\n", name);
    return;
  }
  nfailed++;
  printf("FAIL %s", name);
  if (fmt) {
    va_list ap;
    va_start(ap, fmt);
    printf(": ");
    vprintf(fmt, ap);
    va_end(ap);
  }
  printf("\n");
}

static const char *
tmp(const char *name)
{
  static char bufs[8][512];
  static int next;
  char *b = bufs[next++ % 8];
  snprintf(b, sizeof bufs[0], "%s/%s", dir, name);
  return b;
}

static int
contains(const char *s, const char *part)
{
  return s && strstr(s, part) != NULL;
}

/* The first column of the first row of sql on h, as int64 (-999 on error,
 * -998 for NULL). */
static int64_t
qint(sqlite3 *h, const char *sql)
{
  sqlite3_stmt *st;
  int64_t v = -999;
  if (sqlite3_prepare_v2(h, sql, -1, &st, NULL) != SQLITE_OK) {
    fprintf(stderr, "  qint: %s: %s\n", sql, sqlite3_errmsg(h));
    return v;
  }
  if (sqlite3_step(st) == SQLITE_ROW)
    v = sqlite3_column_type(st, 0) == SQLITE_NULL ? -998
                                                  : sqlite3_column_int64(st, 0);
  sqlite3_finalize(st);
  return v;
}

/* Same, as text into a static buffer ("<null>", "<error>"). */
static const char *
qtext(sqlite3 *h, const char *sql)
{
  static char buf[1024];
  sqlite3_stmt *st;
  snprintf(buf, sizeof buf, "<error>");
  if (sqlite3_prepare_v2(h, sql, -1, &st, NULL) != SQLITE_OK) return buf;
  if (sqlite3_step(st) == SQLITE_ROW) {
    const unsigned char *t = sqlite3_column_text(st, 0);
    snprintf(buf, sizeof buf, "%s", t ? (const char *)t : "<null>");
  }
  sqlite3_finalize(st);
  return buf;
}

static sqlite3 *
raw_open(const char *path, int flags)
{
  sqlite3 *h = NULL;
  if (sqlite3_open_v2(path, &h, flags, NULL) != SQLITE_OK) {
    fprintf(stderr, "  raw_open %s: %s\n", path, h ? sqlite3_errmsg(h) : "?");
    sqlite3_close(h);
    return NULL;
  }
  sqlite3_busy_timeout(h, 5000);
  return h;
}

static double
now_s(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void
fill_info(vsa_run_info *info, const char *script)
{
  vsa_db_run_info_init(info);
  info->script = script;
  info->args = "[\"--sizes\",\"small\"]";
  info->seed = 1234;
  info->host = "testhost";
  info->pid = getpid();
  info->git_rev = "abc123def456-dirty";
  info->vsalab_version = "0.1.0";
  info->gpu_name = "NVIDIA H200";
  info->gpu_cc = "9.0";
  info->sm_count = 132;
  info->driver_version = "12.8";
  info->runtime_version = "12.8";
  info->device_index = 0;
}

static void
fill_row(vsa_result_row *r, int64_t run_id, const char *kernel, int64_t Skv)
{
  vsa_db_result_init(r);
  r->run_id = run_id;
  r->experiment = "smoke";
  r->kernel = kernel;
  r->B = 1;
  r->H = 24;
  r->Sq = 4096;
  r->Skv = Skv;
  r->D = 128;
  r->block = 64;
  r->density = 0.125;
  r->topk = 8;
  r->ragged = 0;
  r->pairs = 512;
  r->ms_median = 1.5;
  r->ms_min = 1.4;
  r->ms_max = 1.8;
  r->spread = (1.8 - 1.4) / 1.5;
  r->samples = 20;
  r->tflops = 321.5;
  r->passed = 1;
  r->note = "first";
  r->extra = "{\"warmup\":3}";
}

static void
fill_err(vsa_result_error *e, const char *output, double rel_l2, int passed)
{
  vsa_db_error_init(e);
  e->output = output;
  e->rel_l2 = rel_l2;
  e->max_abs = rel_l2 * 10;
  e->nonfinite = 0;
  e->norm_ratio = 1.0;
  e->passed = passed;
}

/* Fork; the child runs fn(arg, fd) and exits with its return value, writing
 * any message to fd. Returns the child's wait status; msg gets the text. */
static int
in_child(int (*fn)(void *, int), void *arg, char *msg, size_t n)
{
  int p[2];
  msg[0] = '\0';
  if (pipe(p) != 0) return -1;
  fflush(stdout);
  pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    close(p[0]);
    _exit(fn(arg, p[1]));
  }
  close(p[1]);
  size_t got = 0;
  ssize_t r;
  while (got + 1 < n && (r = read(p[0], msg + got, n - 1 - got)) > 0)
    got += (size_t)r;
  msg[got] = '\0';
  close(p[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  return status;
}

static void
say(int fd, const char *s)
{
  ssize_t r = write(fd, s, strlen(s));
  (void)r;
}

// ----------------------------------------------------------------------------
// checks

static int64_t main_run, row1, row2, row_nan;

static void
test_create_and_log(void)
{
  const char *path = tmp("main.db");
  vsa_db *db = NULL;
  int rc = vsa_db_open(&db, path, 0);
  check(rc == 0 && db, "open creates a new database", "%s", vsa_last_error());
  if (!db) return;
  sqlite3 *h = vsa_db_handle(db);
  check(qint(h, "PRAGMA user_version") == VSA_DB_SCHEMA_VERSION,
        "user_version is set", NULL);
  check(strcmp(qtext(h, "PRAGMA journal_mode"), "wal") == 0,
        "journal_mode is wal", "%s", qtext(h, "PRAGMA journal_mode"));
  check(qint(h, "PRAGMA foreign_keys") == 1, "foreign_keys is on", NULL);
  check(qint(h, "PRAGMA busy_timeout") == 5000, "busy_timeout is 5000", NULL);
  check(qint(h, "PRAGMA synchronous") == 1, "synchronous is NORMAL", NULL);

  vsa_run_info info;
  fill_info(&info, "experiments/smoke.lua");
  rc = vsa_db_run_begin(db, &info, &main_run);
  check(rc == 0 && main_run > 0, "run_begin returns an id", "%s",
        vsa_last_error());

  vsa_result_row r;
  vsa_result_error e[3];
  fill_row(&r, main_run, "bsa_bwd_fast", 4096);
  fill_err(&e[0], "dq", 1e-3, 1);
  fill_err(&e[1], "dk", 5e-3, 1);
  fill_err(&e[2], "dv", 2e-3, 1);
  rc = vsa_db_result_add(db, &r, e, 3, &row1);
  check(rc == 0 && row1 > 0, "result_add with 3 error rows", "%s",
        vsa_last_error());

  fill_row(&r, main_run, "bsa_bwd_ref", 8192);
  r.note = "second";
  r.extra = NULL;
  r.passed = 0;
  fill_err(&e[0], "dq", 0.5, 0);
  fill_err(&e[1], "dk", NAN, 0);
  e[1].nonfinite = 17;
  rc = vsa_db_result_add(db, &r, e, 2, &row2);
  check(rc == 0 && row2 > row1, "result_add with 2 error rows", "%s",
        vsa_last_error());

  fill_row(&r, main_run, "bsa_bwd_fast", 16384);
  r.ms_median = r.ms_min = r.ms_max = r.spread = r.tflops = NAN;
  r.passed = VSA_DB_NULL;
  r.note = "timing failed";
  rc = vsa_db_result_add(db, &r, NULL, 0, &row_nan);
  check(rc == 0, "result_add with NaN timings", "%s", vsa_last_error());

  /* Failures leave nothing behind. */
  int64_t before = qint(h, "SELECT count(*) FROM result");
  fill_row(&r, main_run, "dup", 4096);
  fill_err(&e[0], "dq", 0.1, 1);
  fill_err(&e[1], "dq", 0.2, 1);
  rc = vsa_db_result_add(db, &r, e, 2, NULL);
  check(rc != 0 && contains(vsa_last_error(), "UNIQUE") &&
          contains(vsa_last_error(), "INSERT INTO result_error"),
        "duplicate output fails with the SQL in the message", "%s",
        vsa_last_error());
  check(qint(h, "SELECT count(*) FROM result") == before,
        "failed result_add rolls back its row", NULL);
  fill_row(&r, 999999, "orphan", 4096);
  rc = vsa_db_result_add(db, &r, NULL, 0, NULL);
  check(rc != 0 && contains(vsa_last_error(), "FOREIGN KEY"),
        "result for a missing run fails", "%s", vsa_last_error());
  fill_row(&r, main_run, "bad", 4096);
  r.density = 1.5;
  rc = vsa_db_result_add(db, &r, NULL, 0, NULL);
  check(rc != 0 && contains(vsa_last_error(), "CHECK"),
        "density outside [0,1] fails", "%s", vsa_last_error());
  fill_row(&r, main_run, "bad", 4096);
  r.extra = "{not json";
  rc = vsa_db_result_add(db, &r, NULL, 0, NULL);
  check(rc != 0 && contains(vsa_last_error(), "extra_is_json"),
        "invalid extra JSON fails", "%s", vsa_last_error());
  check(qint(h, "SELECT count(*) FROM result") == before,
        "no partial rows after failures", NULL);

  /* A caller's open transaction: the row goes into a savepoint. */
  sqlite3_exec(h, "BEGIN", NULL, NULL, NULL);
  fill_row(&r, main_run, "nested", 4096);
  rc = vsa_db_result_add(db, &r, e, 1, NULL);
  check(rc == 0 && !sqlite3_get_autocommit(h),
        "result_add inside a caller transaction uses a savepoint", "%s",
        vsa_last_error());
  sqlite3_exec(h, "ROLLBACK", NULL, NULL, NULL);
  check(qint(h, "SELECT count(*) FROM result WHERE kernel = 'nested'") == 0,
        "caller rollback removes the nested row", NULL);

  rc = vsa_db_run_end(db, main_run, "done", NULL);
  check(rc != 0 && contains(vsa_last_error(), "'finished'"),
        "run_end refuses an unknown status", "%s", vsa_last_error());
  rc = vsa_db_run_end(db, 424242, "failed", "x");
  check(rc != 0 && contains(vsa_last_error(), "no run with id 424242"),
        "run_end of a missing run fails", "%s", vsa_last_error());
  rc = vsa_db_run_end(db, main_run, "finished", NULL);
  check(rc == 0, "run_end finished", "%s", vsa_last_error());
  vsa_db_close(db);
}

static void
test_read_back(void)
{
  sqlite3 *h = raw_open(tmp("main.db"), SQLITE_OPEN_READONLY);
  check(h != NULL, "reopen with sqlite3 directly", NULL);
  if (!h) return;
  char sql[512];
  snprintf(sql, sizeof sql,
           "SELECT status = 'finished' AND ended_at IS NOT NULL"
           " AND started_at LIKE '____-__-__T__:__:__.___Z'"
           " AND gpu_name = 'NVIDIA H200' AND gpu_cc = '9.0'"
           " AND sm_count = 132 AND seed = 1234 AND script ="
           " 'experiments/smoke.lua' AND json_extract(args, '$[1]') = 'small'"
           " AND error IS NULL FROM run WHERE id = %lld",
           (long long)main_run);
  check(qint(h, sql) == 1, "run row holds the environment", NULL);
  check(qint(h, "SELECT count(*) FROM result") == 3, "3 result rows", "%lld",
        (long long)qint(h, "SELECT count(*) FROM result"));
  check(qint(h, "SELECT count(*) FROM result_error") == 5, "5 error rows",
        "%lld", (long long)qint(h, "SELECT count(*) FROM result_error"));
  snprintf(sql, sizeof sql,
           "SELECT B = 1 AND H = 24 AND Sq = 4096 AND Skv = 4096 AND D = 128"
           " AND block = 64 AND density = 0.125 AND topk = 8 AND ragged = 0"
           " AND pairs = 512 AND ms_median = 1.5 AND samples = 20"
           " AND abs(tflops - 321.5) < 1e-9 AND passed = 1 AND note = 'first'"
           " AND json_extract(extra, '$.warmup') = 3 AND created_at IS NOT NULL"
           " FROM result WHERE id = %lld",
           (long long)row1);
  check(qint(h, sql) == 1, "result values read back", NULL);
  snprintf(sql, sizeof sql,
           "SELECT rel_l2 IS NULL AND nonfinite = 17 AND passed = 0"
           " FROM result_error WHERE result_id = %lld AND output = 'dk'",
           (long long)row2);
  check(qint(h, sql) == 1, "NaN rel_l2 is NULL in result_error", NULL);
  snprintf(sql, sizeof sql,
           "SELECT ms_median IS NULL AND ms_min IS NULL AND ms_max IS NULL"
           " AND spread IS NULL AND tflops IS NULL AND passed IS NULL"
           " AND typeof(ms_median) = 'null' FROM result WHERE id = %lld",
           (long long)row_nan);
  check(qint(h, sql) == 1, "NaN timings are stored as NULL", NULL);
  snprintf(sql, sizeof sql,
           "SELECT worst_output || ' ' || n_outputs || ' ' || n_failed || ' '"
           " || nonfinite FROM result_summary WHERE id = %lld",
           (long long)row2);
  check(strcmp(qtext(h, sql), "dk 2 2 17") == 0,
        "result_summary puts the non-finite output first", "%s",
        qtext(h, sql));
  snprintf(sql, sizeof sql,
           "SELECT worst_output || ' ' || worst_rel_l2 FROM result_summary"
           " WHERE id = %lld", (long long)row1);
  check(strcmp(qtext(h, sql), "dk 0.005") == 0,
        "result_summary picks the worst rel_l2", "%s", qtext(h, sql));
  snprintf(sql, sizeof sql,
           "SELECT worst_output IS NULL AND n_outputs = 0 FROM result_summary"
           " WHERE id = %lld", (long long)row_nan);
  check(qint(h, sql) == 1, "result_summary keeps rows without errors", NULL);
  check(qint(h, "PRAGMA integrity_check") != -999 &&
          strcmp(qtext(h, "PRAGMA integrity_check"), "ok") == 0,
        "integrity_check ok", NULL);
  sqlite3_close(h);
}

static void
test_refusals(void)
{
  vsa_db *db = NULL;
  /* Upgrade from schema version 1: rows kept, new columns present. */
  {
    const char *v1 = tmp("v1.db");
    sqlite3 *h1 = NULL;
    sqlite3_open(v1, &h1);
    int e1 = sqlite3_exec(h1, schema_text, NULL, NULL, NULL);
    e1 |= sqlite3_exec(h1, "PRAGMA user_version = 1;"
                       "INSERT INTO run (script) VALUES ('old');"
                       "INSERT INTO result (run_id, experiment, kernel, ms_median)"
                       " VALUES (1, 'e', 'k', 1.5);"
                       "INSERT INTO result (run_id, experiment, kernel, ms_median, block)"
                       " VALUES (1, 'e', 'k', 2.5, 128);", NULL, NULL, NULL);
    sqlite3_close(h1);
    check(e1 == 0, "a version-1 database made by hand", "%d", e1);
    vsa_db *u = NULL;
    int rc1 = vsa_db_open(&u, v1, 0);
    check(rc1 == 0, "a version-1 database opens and upgrades", "%s", vsa_last_error());
    if (rc1 == 0) {
      sqlite3_stmt *q = NULL;
      sqlite3_prepare_v2(vsa_db_handle(u),
                         "SELECT (SELECT user_version FROM pragma_user_version),"
                         " (SELECT count(*) FROM result WHERE ms_median = 1.5 AND ms_p20 IS NULL"
                         "  AND gpu_uuid IS NULL),"
                         " (SELECT count(*) FROM run WHERE length(uid) = 32 AND sweep_id IS NULL),"
                         " (SELECT count(*) FROM result WHERE ms_median = 1.5 AND block = 64),"
                         " (SELECT count(*) FROM result WHERE ms_median = 2.5 AND block = 128),"
                         " (SELECT count(*) FROM result WHERE layout = 'bhsd'),"
                         " (SELECT count(*) FROM result_summary WHERE layout = 'bhsd')",
                         -1, &q, NULL);
      int ok = q && sqlite3_step(q) == SQLITE_ROW &&
               sqlite3_column_int(q, 0) == VSA_DB_SCHEMA_VERSION &&
               sqlite3_column_int(q, 1) == 1 && sqlite3_column_int(q, 2) == 1;
      int block_ok = q && sqlite3_column_int(q, 3) == 1 && sqlite3_column_int(q, 4) == 1;
      int layout_ok = q && sqlite3_column_int(q, 5) == 2 && sqlite3_column_int(q, 6) == 2;
      sqlite3_finalize(q);
      check(layout_ok, "old rows read layout 'bhsd' (schema 5), in result and result_summary",
            NULL);
      check(ok, "upgrade to the latest version keeps the old rows, adds the new columns"
            " and gives old runs a uid", "%s",
            sqlite3_errmsg(vsa_db_handle(u)));
      check(block_ok, "an old row without a block size reads block 64 (schema 4); "
            "a row with block 128 keeps it", NULL);
      int64_t rid = 0;
      check(vsa_db_run_begin(u, &(vsa_run_info){.script = "new", .seed = VSA_DB_NULL,
                                                 .pid = VSA_DB_NULL, .sm_count = VSA_DB_NULL,
                                                 .device_index = VSA_DB_NULL,
                                                 .dirty = VSA_DB_NULL,
                                                 .shard_index = VSA_DB_NULL,
                                                 .shard_count = VSA_DB_NULL}, &rid) == 0,
            "the upgraded database takes new runs", "%s", vsa_last_error());
      vsa_db_close(u);
    }
  }

  /* Newer schema version. */
  const char *path = tmp("newer.db");
  int rc = vsa_db_open(&db, path, 0);
  vsa_db_close(db);
  sqlite3 *h = raw_open(path, SQLITE_OPEN_READWRITE);
  sqlite3_exec(h, "PRAGMA user_version = 99", NULL, NULL, NULL);
  sqlite3_close(h);
  db = NULL;
  rc = vsa_db_open(&db, path, 0);
  check(rc != 0 && db == NULL && contains(vsa_last_error(), "version 99") &&
          contains(vsa_last_error(), "newer"),
        "newer user_version refused", "%s", vsa_last_error());
  printf("     (%s)\n", vsa_last_error());
  rc = vsa_db_open(&db, path, 1);
  check(rc != 0 && contains(vsa_last_error(), "newer"),
        "newer user_version refused read-only too", "%s", vsa_last_error());

  /* A text file. */
  path = tmp("notes.txt");
  FILE *f = fopen(path, "w");
  for (int i = 0; i < 100; i++) fprintf(f, "this is not a database %d\n", i);
  fclose(f);
  struct stat before, after;
  stat(path, &before);
  rc = vsa_db_open(&db, path, 0);
  check(rc != 0 && contains(vsa_last_error(), "not a SQLite database"),
        "non-database file refused", "%s", vsa_last_error());
  printf("     (%s)\n", vsa_last_error());
  stat(path, &after);
  check(before.st_size == after.st_size &&
          access(tmp("notes.txt-wal"), F_OK) != 0,
        "non-database file left untouched", NULL);

  /* Another application's SQLite file. */
  path = tmp("other.db");
  h = raw_open(path, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE);
  sqlite3_exec(h, "CREATE TABLE t (x)", NULL, NULL, NULL);
  sqlite3_close(h);
  rc = vsa_db_open(&db, path, 0);
  check(rc != 0 && contains(vsa_last_error(), "not a vsalab one"),
        "foreign SQLite database refused", "%s", vsa_last_error());
  h = raw_open(path, SQLITE_OPEN_READONLY);
  check(strcmp(qtext(h, "PRAGMA journal_mode"), "delete") == 0,
        "foreign database not switched to WAL", NULL);
  sqlite3_close(h);

  /* Cannot open. */
  rc = vsa_db_open(&db, tmp("no/such/dir/x.db"), 0);
  check(rc != 0 && contains(vsa_last_error(), "cannot open"),
        "missing directory refused", "%s", vsa_last_error());
  printf("     (%s)\n", vsa_last_error());
  rc = vsa_db_open(&db, tmp("missing.db"), 1);
  check(rc != 0 && contains(vsa_last_error(), "cannot open read-only") &&
          access(tmp("missing.db"), F_OK) != 0,
        "missing file opened read-only refused, not created", "%s",
        vsa_last_error());
}

static void
test_readonly(void)
{
  vsa_db *db = NULL;
  int rc = vsa_db_open(&db, tmp("main.db"), 1);
  check(rc == 0, "read-only open of an existing db", "%s", vsa_last_error());
  if (!db) return;
  sqlite3 *h = vsa_db_handle(db);
  check(qint(h, "SELECT count(*) FROM result") == 3, "read-only open reads",
        NULL);
  int64_t id = 0;
  vsa_run_info info;
  fill_info(&info, "x.lua");
  rc = vsa_db_run_begin(db, &info, &id);
  check(rc != 0 && contains(vsa_last_error(), "read-only"),
        "read-only db refuses run_begin", "%s", vsa_last_error());
  printf("     (%s)\n", vsa_last_error());
  vsa_result_row r;
  fill_row(&r, main_run, "k", 4096);
  rc = vsa_db_result_add(db, &r, NULL, 0, NULL);
  check(rc != 0 && contains(vsa_last_error(), "read-only"),
        "read-only db refuses result_add", "%s", vsa_last_error());
  rc = sqlite3_exec(h, "DELETE FROM result", NULL, NULL, NULL);
  check(rc == SQLITE_READONLY, "ad-hoc write on the read-only handle fails",
        "rc %d", rc);
  vsa_db_close(db);
}

/* Child for the write-protected file: as a non-root user. */
static int
child_open_protected(void *arg, int fd)
{
  const char *path = arg;
  if (getuid() == 0 && (setgid(65534) != 0 || setuid(65534) != 0)) {
    say(fd, "cannot drop root");
    return 3;
  }
  vsa_db *db = NULL;
  if (vsa_db_open(&db, path, 0) == 0) {
    say(fd, "opened for writing");
    vsa_db_close(db);
    return 1;
  }
  say(fd, vsa_last_error());
  if (!contains(vsa_last_error(), "read-only")) return 1;
  if (vsa_db_open(&db, path, 1) != 0) {
    say(fd, " / read-only open failed: ");
    say(fd, vsa_last_error());
    return 2;
  }
  int64_t n = qint(vsa_db_handle(db), "SELECT count(*) FROM run");
  vsa_db_close(db);
  return n == 1 ? 0 : 4;
}

static void
test_protected_file(void)
{
  char sub[512];
  snprintf(sub, sizeof sub, "%s", tmp("ro"));
  mkdir(sub, 0777);
  chmod(sub, 0777);
  chmod(dir, 0755);
  char path[600];
  snprintf(path, sizeof path, "%s/p.db", sub);
  vsa_db *db = NULL;
  vsa_run_info info;
  fill_info(&info, "p.lua");
  if (vsa_db_open(&db, path, 0) || vsa_db_run_begin(db, &info, NULL)) {
    check(0, "write-protected file setup", "%s", vsa_last_error());
    vsa_db_close(db);
    return;
  }
  vsa_db_close(db);
  chmod(path, 0444);
  char msg[1024];
  int st = in_child(child_open_protected, path, msg, sizeof msg);
  check(WIFEXITED(st) && WEXITSTATUS(st) == 0,
        "write-protected file: refused for writing, readable read-only",
        "status %d: %s", WIFEXITED(st) ? WEXITSTATUS(st) : -1, msg);
  printf("     (%s)\n", msg);
  chmod(path, 0644);
}

static void
test_two_connections(void)
{
  const char *path = tmp("shared.db");
  vsa_db *a = NULL, *b = NULL;
  int rc = vsa_db_open(&a, path, 0) | vsa_db_open(&b, path, 0);
  check(rc == 0 && a && b, "two connections open one file", "%s",
        vsa_last_error());
  if (!a || !b) {
    vsa_db_close(a);
    vsa_db_close(b);
    return;
  }
  vsa_run_info info;
  fill_info(&info, "a.lua");
  int64_t ra = 0, rb = 0;
  rc = vsa_db_run_begin(a, &info, &ra);
  rc |= vsa_db_run_begin(b, &info, &rb);
  vsa_result_row r;
  for (int i = 0; i < 10 && rc == 0; i++) {
    fill_row(&r, i % 2 ? rb : ra, i % 2 ? "b" : "a", 1024 * (i + 1));
    rc = vsa_db_result_add(i % 2 ? b : a, &r, NULL, 0, NULL);
  }
  rc |= vsa_db_run_end(a, ra, "finished", NULL);
  rc |= vsa_db_run_end(b, rb, "interrupted", "Ctrl-C");
  check(rc == 0, "interleaved writes from two connections", "%s",
        vsa_last_error());
  check(qint(vsa_db_handle(a), "SELECT count(*) FROM result") == 10 &&
          qint(vsa_db_handle(b), "SELECT count(*) FROM result") == 10,
        "both connections see all 10 rows", NULL);
  vsa_db_close(a);
  vsa_db_close(b);
}

/* Holds the write lock for 1 s, then commits and sends the time it
 * committed (CLOCK_MONOTONIC, shared by both processes). */
static int
child_hold_lock(void *arg, int fd)
{
  const char *path = arg;
  vsa_db *db = NULL;
  if (vsa_db_open(&db, path, 0)) {
    say(fd, vsa_last_error());
    return 1;
  }
  sqlite3 *h = vsa_db_handle(db);
  if (sqlite3_exec(h, "BEGIN IMMEDIATE; INSERT INTO run (script) "
                      "VALUES ('holder')", NULL, NULL, NULL) != SQLITE_OK) {
    say(fd, sqlite3_errmsg(h));
    return 1;
  }
  say(fd, "L"); /* the parent starts writing now */
  usleep(1000 * 1000);
  double t = now_s();
  int rc = sqlite3_exec(h, "COMMIT", NULL, NULL, NULL);
  if (write(fd, &t, sizeof t) != (ssize_t)sizeof t) rc = SQLITE_ERROR;
  close(fd);
  vsa_db_close(db);
  return rc == SQLITE_OK ? 0 : 1;
}

static void
test_busy_wait(void)
{
  const char *path = tmp("busy.db");
  vsa_db *db = NULL;
  if (vsa_db_open(&db, path, 0)) {
    check(0, "busy setup", "%s", vsa_last_error());
    return;
  }
  vsa_db_close(db);

  int p[2];
  if (pipe(p) != 0) return;
  fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) {
    close(p[0]);
    _exit(child_hold_lock((void *)path, p[1]));
  }
  close(p[1]);
  char c = 0;
  ssize_t n = read(p[0], &c, 1);
  /* The child holds the write lock now; open and write: must wait until it
   * commits. (Not "waited > 0.5 s": this process may get the CPU late.) */
  double t0 = now_s();
  int64_t id = 0;
  vsa_run_info info;
  fill_info(&info, "waiter.lua");
  int rc = n == 1 && c == 'L' ? vsa_db_open(&db, path, 0) : -1;
  if (rc == 0) rc = vsa_db_run_begin(db, &info, &id);
  double t_done = now_s();
  double t_commit = 0;
  if (read(p[0], &t_commit, sizeof t_commit) != (ssize_t)sizeof t_commit) t_commit = 0;
  close(p[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  check(rc == 0 && t_commit > 0 && t_done >= t_commit && WIFEXITED(status) &&
          WEXITSTATUS(status) == 0,
        "a writer waits for another process's lock (busy timeout)",
        "rc %d, done %.3f s after the holder's commit: %s", rc, t_done - t_commit, vsa_last_error());
  printf("     (waited %.2f s)\n", t_done - t0);
  if (rc == 0)
    check(qint(vsa_db_handle(db), "SELECT count(*) FROM run") == 2,
          "both runs present after the wait", NULL);
  vsa_db_close(db);
}

/* One of several processes logging into one fresh file at once. */
static int
child_writer(void *arg, int fd)
{
  const char *path = arg;
  vsa_db *db = NULL;
  vsa_run_info info;
  fill_info(&info, "worker.lua");
  info.pid = getpid();
  int64_t run = 0;
  if (vsa_db_open(&db, path, 0) || vsa_db_run_begin(db, &info, &run)) {
    say(fd, vsa_last_error());
    vsa_db_close(db);
    return 1;
  }
  vsa_result_row r;
  vsa_result_error e;
  for (int i = 0; i < 50; i++) {
    fill_row(&r, run, "worker", 64 * (i + 1));
    fill_err(&e, "dq", 1e-3, 1);
    if (vsa_db_result_add(db, &r, &e, 1, NULL)) {
      say(fd, vsa_last_error());
      vsa_db_close(db);
      return 1;
    }
  }
  int rc = vsa_db_run_end(db, run, "finished", NULL);
  if (rc) say(fd, vsa_last_error());
  vsa_db_close(db);
  return rc ? 1 : 0;
}

static void
test_concurrent_writers(void)
{
  enum { NPROC = 4 };
  const char *path = tmp("concurrent.db");
  pid_t pids[NPROC];
  int fds[NPROC];
  fflush(stdout);
  for (int i = 0; i < NPROC; i++) {
    int p[2];
    if (pipe(p) != 0) return;
    pids[i] = fork();
    if (pids[i] == 0) {
      close(p[0]);
      _exit(child_writer((void *)path, p[1]));
    }
    close(p[1]);
    fds[i] = p[0];
  }
  int ok = 1;
  char msg[1024] = "";
  for (int i = 0; i < NPROC; i++) {
    char m[512];
    ssize_t n = read(fds[i], m, sizeof m - 1);
    close(fds[i]);
    int status = 0;
    waitpid(pids[i], &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      ok = 0;
      if (n > 0) {
        m[n] = '\0';
        snprintf(msg, sizeof msg, "%s", m);
      }
    }
  }
  check(ok, "4 processes create and log into one new file at once", "%s",
        msg);
  sqlite3 *h = raw_open(path, SQLITE_OPEN_READONLY);
  check(h && qint(h, "SELECT count(*) FROM result") == NPROC * 50 &&
          qint(h, "SELECT count(*) FROM result_error") == NPROC * 50 &&
          qint(h, "SELECT count(*) FROM run WHERE status = 'finished'") ==
            NPROC,
        "all 200 rows and 4 finished runs present", "%lld rows",
        (long long)(h ? qint(h, "SELECT count(*) FROM result") : -1));
  sqlite3_close(h);
}

/* Begins a run, logs 3 rows and dies without ending the run. */
static int
child_killed(void *arg, int fd)
{
  const char *path = arg;
  vsa_db *db = NULL;
  vsa_run_info info;
  fill_info(&info, "doomed.lua");
  int64_t run = 0;
  if (vsa_db_open(&db, path, 0) || vsa_db_run_begin(db, &info, &run)) {
    say(fd, vsa_last_error());
    return 1;
  }
  vsa_result_row r;
  vsa_result_error e[2];
  for (int i = 0; i < 3; i++) {
    fill_row(&r, run, "doomed", 1024 * (i + 1));
    fill_err(&e[0], "dq", 1e-3, 1);
    fill_err(&e[1], "dk", 2e-3, 1);
    if (vsa_db_result_add(db, &r, e, 2, NULL)) {
      say(fd, vsa_last_error());
      return 1;
    }
  }
  _exit(9); /* no run_end, no close */
}

/* Schema 3: every run gets a distinct uid; sweep, shard and devices on the
 * run and the GPU on each row are stored as given. */
static void
test_sweeps_and_gpus(void)
{
  vsa_db *db = NULL;
  if (vsa_db_open(&db, tmp("sweep.db"), 0) != 0) {
    check(0, "open sweep.db", "%s", vsa_last_error());
    return;
  }
  sqlite3 *h = vsa_db_handle(db);
  vsa_run_info info;
  fill_info(&info, "s.lua");
  info.sweep_id = "slurm-42";
  info.shard_index = 3;
  info.shard_count = 4;
  info.devices = "[{\"index\":0,\"name\":\"NVIDIA H200\",\"uuid\":\"GPU-1\"}]";
  int64_t a = 0, b = 0;
  int rc = vsa_db_run_begin(db, &info, &a);
  fill_info(&info, "s.lua");
  rc |= vsa_db_run_begin(db, &info, &b);
  check(rc == 0, "runs with sweep, shard and devices begin", "%s", vsa_last_error());
  check(qint(h, "SELECT count(DISTINCT uid) FROM run WHERE length(uid) = 32") == 2,
        "each run gets its own 32-hex-digit uid", NULL);
  check(qint(h, "SELECT count(*) FROM run WHERE sweep_id = 'slurm-42' AND shard_index = 3"
                " AND shard_count = 4 AND json_extract(devices, '$[0].uuid') = 'GPU-1'") == 1,
        "sweep, shard and devices stored", NULL);
  check(qint(h, "SELECT count(*) FROM run WHERE sweep_id IS NULL AND shard_index IS NULL") == 1,
        "unknown sweep and shard stored as NULL", NULL);
  vsa_result_row row;
  fill_row(&row, a, "sm90a", 4096);
  row.gpu_index = 1;
  row.gpu_name = "NVIDIA H200";
  row.gpu_uuid = "GPU-2";
  check(vsa_db_result_add(db, &row, NULL, 0, NULL) == 0, "a row with its GPU", "%s",
        vsa_last_error());
  check(qint(h, "SELECT count(*) FROM result WHERE gpu_index = 1 AND gpu_uuid = 'GPU-2'") == 1,
        "the row names its GPU", NULL);
  fill_info(&info, "s.lua");
  info.shard_count = 0;
  check(vsa_db_run_begin(db, &info, NULL) != 0, "shard_count 0 refused", NULL);
  check(sqlite3_exec(h, "UPDATE run SET uid = (SELECT uid FROM run WHERE id = 1)", NULL, NULL,
                     NULL) != SQLITE_OK, "a duplicate uid refused", NULL);
  vsa_db_close(db);
}

static void
test_killed_run(void)
{
  const char *path = tmp("killed.db");
  char msg[1024];
  int st = in_child(child_killed, (void *)path, msg, sizeof msg);
  check(WIFEXITED(st) && WEXITSTATUS(st) == 9, "child died with status 9",
        "status %d %s", WIFEXITED(st) ? WEXITSTATUS(st) : -1, msg);
  vsa_db *db = NULL;
  int rc = vsa_db_open(&db, path, 0);
  check(rc == 0, "reopen after the crash", "%s", vsa_last_error());
  if (!db) return;
  sqlite3 *h = vsa_db_handle(db);
  check(qint(h, "SELECT count(*) FROM result") == 3, "3 rows kept", "%lld",
        (long long)qint(h, "SELECT count(*) FROM result"));
  check(qint(h, "SELECT count(*) FROM result_error") == 6,
        "their 6 error rows kept", NULL);
  check(qint(h, "SELECT count(*) FROM run WHERE status = 'running'"
                " AND ended_at IS NULL") == 1,
        "run still 'running' with ended_at NULL", "%s",
        qtext(h, "SELECT status || ' ' || ifnull(ended_at, 'NULL') FROM run"));
  vsa_db_close(db);
}

// ----------------------------------------------------------------------------

static void
remove_tree(const char *path)
{
  char cmd[700];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", path);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", path);
}

int
main(int argc, char **argv)
{
  if (argc != 2) {
    fprintf(stderr, "usage: %s path/to/db/schema.sql\n", argv[0]);
    return 2;
  }
  if (load_schema(argv[1])) return 2;
  if (!mkdtemp(dir)) {
    perror("mkdtemp");
    return 2;
  }
  setvbuf(stdout, NULL, _IOLBF, 0);
  printf("# sqlite %s, temp dir %s\n", sqlite3_libversion(), dir);

  test_create_and_log();
  test_read_back();
  test_refusals();
  test_readonly();
  test_protected_file();
  test_two_connections();
  test_busy_wait();
  test_concurrent_writers();
  test_killed_run();
  test_sweeps_and_gpus();

  printf("%d passed, %d failed\n", npassed, nfailed);
  if (nfailed == 0)
    remove_tree(dir);
  else
    printf("# kept %s\n", dir);
  return nfailed ? 1 : 0;
}
