/* l_db.c — Lua binding of the results database (db.h): class "vsa.Db".
 *
 *   local db = vsa.db_open("results.db" [, {readonly = true}])
 *   local run = db:begin_run{script = "experiments/smoke.lua", args = arg,
 *                            seed = 1, gpu_name = "NVIDIA H200", ...}
 *   local id = db:log{experiment = "smoke", kernel = "bsa_bwd_fast", B = 1,
 *                     H = 24, Sq = 4096, Skv = 4096, D = 128, ms_median = 1.5,
 *                     passed = true, errors = {dq = {rel_l2 = 1e-3}}}
 *   db:end_run(run, "finished")
 *   for _, r in ipairs(db:q("SELECT * FROM result WHERE run_id = ?", run)) do
 *     print(r.kernel, r.ms_median)
 *   end
 *   db:close()
 *
 * Tables are read strictly: an unknown field raises (a typo must not drop a
 * value), and each field must have its column's type. Missing fields and NaN
 * numbers are stored as NULL. db:log uses the run of the last begin_run
 * unless the row names a run_id. begin_run fills pid and host, and git_rev /
 * vsalab_version when built with VSA_GIT_REV / VSA_VERSION, unless given.
 * db:q returns integers as Lua numbers, and beyond +-2^53 (where a double
 * would round them) as their exact decimal strings.
 */
#include <ctype.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "git_rev.h" /* generated at build time: VSA_GIT_REV */
#include "db.h"
#include "lua_api.h"

#define VSA_DB_MT "vsa.Db"
#define VSA_DB_STMT_MT "vsa.DbStmt" /* finalizes a db:q statement on raise */

typedef struct {
  vsa_db *db;     /* NULL once closed */
  int64_t run_id; /* run of the last begin_run, VSA_DB_NULL if none */
} l_db;

// ----------------------------------------------------------------------------
// reading tables into db.h structs

typedef enum {
  F_TEXT,   /* string */
  F_INT,    /* integral number */
  F_REAL,   /* number, NaN for unknown */
  F_FLAG,   /* boolean or 0 / 1 */
  F_ARGS,   /* JSON string or array of strings (run.args) */
  F_ERRORS, /* table of error tables keyed by output (log) */
} field_type;

typedef struct {
  const char *name;
  field_type type;
  size_t off;
} field;

#define RUN(name, type) {#name, type, offsetof(vsa_run_info, name)}
static const field run_fields[] = {
  RUN(script, F_TEXT),         RUN(args, F_ARGS),
  RUN(seed, F_INT),            RUN(host, F_TEXT),
  RUN(pid, F_INT),             RUN(git_rev, F_TEXT),
  RUN(vsalab_version, F_TEXT), RUN(gpu_name, F_TEXT),
  RUN(gpu_cc, F_TEXT),         RUN(sm_count, F_INT),
  RUN(driver_version, F_TEXT), RUN(runtime_version, F_TEXT),
  RUN(device_index, F_INT),    RUN(context, F_TEXT),
  RUN(cuda_visible_devices, F_TEXT), RUN(nvcc_flags, F_TEXT),
  RUN(dirty, F_FLAG),          RUN(sweep_id, F_TEXT),
  RUN(shard_index, F_INT),     RUN(shard_count, F_INT),
  RUN(devices, F_TEXT),        {NULL, F_TEXT, 0},
};

#define ROW(name, type) {#name, type, offsetof(vsa_result_row, name)}
static const field row_fields[] = {
  ROW(run_id, F_INT),    ROW(experiment, F_TEXT), ROW(kernel, F_TEXT),
  ROW(B, F_INT),         ROW(H, F_INT),           ROW(Sq, F_INT),
  ROW(Skv, F_INT),       ROW(D, F_INT),           ROW(block, F_INT),
  ROW(density, F_REAL),  ROW(topk, F_INT),        ROW(ragged, F_FLAG),
  ROW(pairs, F_INT),     ROW(ms_median, F_REAL),  ROW(ms_min, F_REAL),
  ROW(ms_max, F_REAL),   ROW(spread, F_REAL),     ROW(samples, F_INT),
  ROW(tflops, F_REAL),   ROW(passed, F_FLAG),     ROW(note, F_TEXT),
  ROW(extra, F_TEXT),    ROW(ms_p20, F_REAL),     ROW(ms_p80, F_REAL),
  ROW(rel_stddev, F_REAL), ROW(mode, F_TEXT),     ROW(point_hash, F_TEXT),
  ROW(samples_ms, F_TEXT), ROW(sm_clock_start_mhz, F_REAL),
  ROW(sm_clock_end_mhz, F_REAL), ROW(throttled, F_FLAG),
  ROW(gpu_index, F_INT), ROW(gpu_name, F_TEXT),   ROW(gpu_uuid, F_TEXT),
  ROW(layout, F_TEXT),
  {"errors", F_ERRORS, 0}, {NULL, F_TEXT, 0},
};

#define ERR(name, type) {#name, type, offsetof(vsa_result_error, name)}
static const field error_fields[] = {
  ERR(rel_l2, F_REAL),     ERR(max_abs, F_REAL), ERR(nonfinite, F_INT),
  ERR(norm_ratio, F_REAL), ERR(passed, F_FLAG),  {NULL, F_TEXT, 0},
};

/* Raise "db:log: field '<prefix><name>' <what>" (luaL_argerror would say
 * '?' for a method; vsalab.log reaches here too). */
static int
field_error(lua_State *L, int arg, const char *prefix, const char *name,
            const char *what)
{
  return luaL_error(L, "%s: field '%s%s' %s", arg == 1 ? "db:begin_run" : "db:log", prefix,
                    name, what);
}

/* An integral lua_Number within int64 range. */
static int
to_int64(lua_Number v, int64_t *out)
{
  /* -2^63 itself is VSA_DB_NULL, the "unknown" marker: out of range. */
  if (!(v > -9223372036854775808.0 && v < 9223372036854775808.0) ||
      v != floor(v))
    return 0;
  *out = (int64_t)v;
  return 1;
}

/* Store the value at idx into base according to f. F_ARGS and F_ERRORS are
 * only type-checked here (the caller handles them). */
static void
set_field(lua_State *L, int idx, int arg, const field *f, char *base,
          const char *prefix)
{
  int t = lua_type(L, idx);
  switch (f->type) {
  case F_TEXT: {
    if (t != LUA_TSTRING)
      field_error(L, arg, prefix, f->name, "must be a string");
    size_t len;
    const char *s = lua_tolstring(L, idx, &len);
    if (strlen(s) != len) /* SQLite would keep only the text before the NUL */
      field_error(L, arg, prefix, f->name, "must not contain a NUL byte");
    /* The timing modes of vsalab.bench (bench.modes). */
    if (strcmp(f->name, "mode") == 0 && strcmp(s, "hot") && strcmp(s, "cold") && strcmp(s, "graph") &&
        strcmp(s, "sustained"))
      field_error(L, arg, prefix, f->name, "must be 'hot', 'cold', 'graph' or 'sustained'");
    *(const char **)(base + f->off) = s;
    break;
  }
  case F_INT:
    if (t != LUA_TNUMBER ||
        !to_int64(lua_tonumber(L, idx), (int64_t *)(base + f->off)))
      field_error(L, arg, prefix, f->name, "must be an integer");
    break;
  case F_REAL:
    if (t != LUA_TNUMBER)
      field_error(L, arg, prefix, f->name, "must be a number");
    *(double *)(base + f->off) = lua_tonumber(L, idx);
    break;
  case F_FLAG:
    if (t == LUA_TBOOLEAN) {
      *(int64_t *)(base + f->off) = lua_toboolean(L, idx);
    } else if (t == LUA_TNUMBER &&
               (lua_tonumber(L, idx) == 0 || lua_tonumber(L, idx) == 1)) {
      *(int64_t *)(base + f->off) = (int64_t)lua_tonumber(L, idx);
    } else {
      field_error(L, arg, prefix, f->name, "must be a boolean");
    }
    break;
  case F_ARGS:
    if (t == LUA_TSTRING)
      *(const char **)(base + f->off) = lua_tostring(L, idx);
    else if (t != LUA_TTABLE)
      field_error(L, arg, prefix, f->name,
                  "must be a JSON string or an array of strings");
    break;
  case F_ERRORS:
    if (t != LUA_TTABLE)
      field_error(L, arg, prefix, f->name,
                  "must be a table of error tables keyed by output");
    break;
  }
}

/* Read every field of the table at t (argument arg of the caller) into base;
 * raises on a field not in fields or of the wrong type. Strings stay owned by
 * the table, which the caller keeps on the stack. */
static void
read_fields(lua_State *L, int t, int arg, const field *fields, void *base,
            const char *prefix)
{
  lua_pushnil(L);
  while (lua_next(L, t)) {
    if (lua_type(L, -2) != LUA_TSTRING)
      luaL_error(L, "%s: %skeys must be field names, got a %s",
                 arg == 1 ? "db:begin_run" : "db:log", prefix, luaL_typename(L, -2));
    const char *k = lua_tostring(L, -2);
    const field *f = fields;
    while (f->name && strcmp(f->name, k) != 0) f++;
    if (!f->name) field_error(L, arg, prefix, k, "is unknown");
    set_field(L, lua_gettop(L), arg, f, base, prefix);
    lua_pop(L, 1);
  }
}

/* Push the JSON array text of the array of strings at t. */
static void
push_json_strings(lua_State *L, int t, int arg, const char *name)
{
  int n = (int)lua_objlen(L, t);
  for (int i = 1; i <= n; i++) {
    lua_rawgeti(L, t, i);
    if (lua_type(L, -1) != LUA_TSTRING)
      field_error(L, arg, "", name, "must be a JSON string or an array of "
                                    "strings");
    lua_pop(L, 1);
  }
  luaL_Buffer b;
  luaL_buffinit(L, &b);
  luaL_addchar(&b, '[');
  for (int i = 1; i <= n; i++) {
    size_t len;
    /* Balanced stack use between buffer calls; the table keeps the string. */
    lua_rawgeti(L, t, i);
    const char *s = lua_tolstring(L, -1, &len);
    lua_pop(L, 1);
    if (i > 1) luaL_addchar(&b, ',');
    luaL_addchar(&b, '"');
    for (size_t j = 0; j < len; j++) {
      unsigned char c = (unsigned char)s[j];
      if (c == '"' || c == '\\') {
        luaL_addchar(&b, '\\');
        luaL_addchar(&b, (char)c);
      } else if (c < 0x20) {
        char esc[8];
        snprintf(esc, sizeof esc, "\\u%04x", c);
        luaL_addstring(&b, esc);
      } else {
        luaL_addchar(&b, (char)c);
      }
    }
    luaL_addchar(&b, '"');
  }
  luaL_addchar(&b, ']');
  luaL_pushresult(&b);
}

// ----------------------------------------------------------------------------
// vsa.Db

static l_db *
check_db(lua_State *L)
{
  return (l_db *)luaL_checkudata(L, 1, VSA_DB_MT);
}

static l_db *
check_open(lua_State *L)
{
  l_db *u = check_db(L);
  if (!u->db) luaL_error(L, "db is closed");
  return u;
}

static int
raise_core(lua_State *L)
{
  return luaL_error(L, "%s", vsa_last_error());
}

/* vsa.db_open(path [, {readonly = bool, snapshot = bool}]) -> Db
 * (snapshot: read-only, a finished DB read as it stands: VSA_DB_SNAPSHOT) */
static int
l_db_open(lua_State *L)
{
  size_t path_len;
  const char *path = luaL_checklstring(L, 1, &path_len);
  if (strlen(path) != path_len)
    return luaL_error(L, "db_open: the path contains a NUL byte");
  int readonly = 0;
  if (!lua_isnoneornil(L, 2)) {
    luaL_checktype(L, 2, LUA_TTABLE);
    lua_pushnil(L);
    while (lua_next(L, 2)) {
      const char *key = lua_type(L, -2) == LUA_TSTRING ? lua_tostring(L, -2) : NULL;
      int snapshot = key && strcmp(key, "snapshot") == 0;
      if (!key || (strcmp(key, "readonly") != 0 && !snapshot))
        luaL_argerror(L, 2, lua_pushfstring(L, "unknown option '%s'",
                                            key ? key : luaL_typename(L, -2)));
      if (lua_type(L, -1) != LUA_TBOOLEAN)
        luaL_argerror(L, 2, lua_pushfstring(L, "option '%s' must be a boolean", key));
      if (lua_toboolean(L, -1)) readonly = snapshot ? VSA_DB_SNAPSHOT : (readonly ? readonly : 1);
      lua_pop(L, 1);
    }
  }
  /* Userdata first, so a raise after opening cannot leak the connection. */
  l_db *u = (l_db *)lua_newuserdata(L, sizeof *u);
  u->db = NULL;
  u->run_id = VSA_DB_NULL;
  luaL_getmetatable(L, VSA_DB_MT);
  lua_setmetatable(L, -2);
  if (vsa_db_open(&u->db, path, readonly)) return raise_core(L);
  return 1;
}

/* db:begin_run(t) -> run id. t holds the run columns by name. */
static int
l_db_begin_run(lua_State *L)
{
  l_db *u = check_open(L);
  vsa_run_info info;
  vsa_db_run_info_init(&info);
  if (!lua_isnoneornil(L, 2)) {
    luaL_checktype(L, 2, LUA_TTABLE);
    read_fields(L, 2, 1, run_fields, &info, ""); /* arg 1: names begin_run in errors */
    lua_getfield(L, 2, "args");
    if (lua_istable(L, -1)) {
      push_json_strings(L, lua_gettop(L), 2, "args");
      info.args = lua_tostring(L, -1); /* stays on the stack */
    }
  }
  char host[256];
  if (!info.host && gethostname(host, sizeof host) == 0) {
    host[sizeof host - 1] = '\0';
    info.host = host;
  }
  if (info.pid == VSA_DB_NULL) info.pid = (int64_t)getpid();
#ifdef VSA_GIT_REV
  if (!info.git_rev) info.git_rev = VSA_GIT_REV;
#endif
#ifdef VSA_VERSION
  if (!info.vsalab_version) info.vsalab_version = VSA_VERSION;
#endif
  int64_t id;
  if (vsa_db_run_begin(u->db, &info, &id)) return raise_core(L);
  u->run_id = id;
  lua_pushnumber(L, (lua_Number)id);
  return 1;
}

/* db:end_run(id, status [, err]); status "finished", "failed" or
 * "interrupted". */
static int
l_db_end_run(lua_State *L)
{
  l_db *u = check_open(L);
  int64_t id = 0;
  luaL_argcheck(L, to_int64(luaL_checknumber(L, 2), &id), 2,
                "run id must be an integer");
  const char *status = luaL_checkstring(L, 3);
  const char *err = luaL_optstring(L, 4, NULL);
  if (vsa_db_run_end(u->db, id, status, err)) return raise_core(L);
  if (id == u->run_id) u->run_id = VSA_DB_NULL;
  return 0;
}

/* db:log(row) -> result id. row holds the result columns by name, plus
 * errors = {<output> = {rel_l2=, max_abs=, nonfinite=, norm_ratio=,
 * passed=}, ...}. Committed before it returns. */
static int
l_db_log(lua_State *L)
{
  l_db *u = check_open(L);
  luaL_checktype(L, 2, LUA_TTABLE);
  /* Rows commit as they are measured: inside a caller's open transaction a
   * later rollback (or close) would silently take them back. */
  if (!sqlite3_get_autocommit(vsa_db_handle(u->db)))
    return luaL_error(L, "db:log: a transaction is open on this connection; "
                         "commit it first (rows are committed as they are logged)");
  vsa_result_row row;
  vsa_db_result_init(&row);
  read_fields(L, 2, 2, row_fields, &row, "");
  if (!row.experiment) return luaL_error(L, "db:log: field 'experiment' is required");
  if (!row.kernel) return luaL_error(L, "db:log: field 'kernel' is required");
  if (row.run_id == VSA_DB_NULL) row.run_id = u->run_id;
  if (row.run_id == VSA_DB_NULL)
    return luaL_error(L, "db:log: no run; call db:begin_run first or give "
                         "the row a run_id");

  int nerrs = 0;
  vsa_result_error *errs = NULL;
  lua_getfield(L, 2, "errors");
  int et = lua_gettop(L);
  if (lua_istable(L, et)) {
    lua_pushnil(L);
    while (lua_next(L, et)) {
      nerrs++;
      lua_pop(L, 1);
    }
    /* Lua-owned, so a raise below leaks nothing. */
    errs = (vsa_result_error *)lua_newuserdata(
      L, (size_t)(nerrs ? nerrs : 1) * sizeof *errs);
    int i = 0;
    lua_pushnil(L);
    while (lua_next(L, et)) {
      if (lua_type(L, -2) != LUA_TSTRING)
        luaL_error(L, "db:log: field 'errors' must be keyed by output name, got a %s key",
                   luaL_typename(L, -2));
      const char *output = lua_tostring(L, -2);
      const char *prefix = lua_pushfstring(L, "errors.%s.", output);
      if (lua_type(L, -2) != LUA_TTABLE)
        luaL_error(L, "db:log: field 'errors.%s' must be a table", output);
      vsa_db_error_init(&errs[i]);
      errs[i].output = output;
      read_fields(L, lua_gettop(L) - 1, 2, error_fields, &errs[i], prefix);
      i++;
      lua_pop(L, 2); /* prefix, value */
    }
  }
  int64_t id;
  if (vsa_db_result_add(u->db, &row, errs, nerrs, &id)) return raise_core(L);
  lua_pushnumber(L, (lua_Number)id);
  return 1;
}

/* __gc of the guard around a db:q statement. */
static int
l_stmt_gc(lua_State *L)
{
  sqlite3_stmt **g = (sqlite3_stmt **)lua_touserdata(L, 1);
  if (g && *g) {
    sqlite3_finalize(*g);
    *g = NULL;
  }
  return 0;
}

/* Raise "db '<path>': <sqlite message> in: <sql>", finalizing the statement
 * first. */
static int
raise_stmt(lua_State *L, l_db *u, sqlite3_stmt **g, const char *sql)
{
  const char *msg = lua_pushfstring(L, "db '%s': %s in: %s",
                                    vsa_db_path(u->db),
                                    sqlite3_errmsg(vsa_db_handle(u->db)), sql);
  sqlite3_finalize(*g);
  *g = NULL;
  return luaL_error(L, "%s", msg);
}

/* A PRAGMA that only reads ("PRAGMA journal_mode", "PRAGMA main.page_size";
 * no "=" and no argument): SQLite does not call it read-only, as the same
 * name with a value writes. */
static int
pragma_read(const char *sql)
{
  if (!sql) return 0;
  while (*sql == ' ' || *sql == '\t' || *sql == '\n' || *sql == '\r') sql++;
  if (strncasecmp(sql, "pragma", 6) != 0) return 0;
  char low[256];
  size_t n = 0;
  for (const char *p = sql + 6; *p; p++) {
    if (*p == '=' || *p == '(') return 0;
    if (n + 1 < sizeof low) low[n++] = (char)tolower((unsigned char)*p);
  }
  low[n] = '\0';
  /* These act without a value: checkpointing, freeing pages, ANALYZE. */
  static const char *const acting[] = {"wal_checkpoint", "incremental_vacuum", "optimize"};
  for (size_t i = 0; i < sizeof acting / sizeof acting[0]; i++)
    if (strstr(low, acting[i])) return 0;
  return 1;
}

/* Integers a double holds exactly: |v| <= 2^53. */
#define INT53_MAX ((sqlite3_int64)1 << 53)

/* db:q(sql, ...) -> array of rows (tables keyed by column name; NULL columns
 * absent; an INTEGER beyond +-2^53 as its exact decimal string)
 * [, changes for a statement that writes]. One statement; values
 * bind by position (numbers: integral ones as INTEGER, others as REAL;
 * {real = x} as REAL whatever x is, so 1.0 stays a REAL; strings; booleans
 * as 1/0; nil as NULL). */
static int
l_db_q(lua_State *L)
{
  l_db *u = check_open(L);
  size_t len;
  const char *sql = luaL_checklstring(L, 2, &len);
  int top = lua_gettop(L), nargs = top - 2;
  for (int i = 3; i <= top; i++) {
    int t = lua_type(L, i);
    int real = 0;
    if (t == LUA_TTABLE) {
      lua_getfield(L, i, "real");
      real = lua_type(L, -1) == LUA_TNUMBER;
      lua_pop(L, 1);
    }
    luaL_argcheck(L, t == LUA_TNIL || t == LUA_TNUMBER || t == LUA_TSTRING ||
                       t == LUA_TBOOLEAN || real,
                  i, "value to bind must be a number, {real = number}, string, boolean or nil");
  }
  sqlite3 *h = vsa_db_handle(u->db);
  sqlite3_stmt **g = (sqlite3_stmt **)lua_newuserdata(L, sizeof *g);
  *g = NULL;
  luaL_getmetatable(L, VSA_DB_STMT_MT);
  lua_setmetatable(L, -2);

  const char *tail = NULL;
  if (sqlite3_prepare_v2(h, sql, (int)len, g, &tail) != SQLITE_OK)
    return raise_stmt(L, u, g, sql);
  lua_newtable(L);
  if (!*g) return 1; /* only whitespace or comments */
  while (tail && tail < sql + len &&
         (*tail == ' ' || *tail == '\t' || *tail == '\n' || *tail == '\r' ||
          *tail == ';'))
    tail++;
  if (tail && tail < sql + len) { /* only comments after it are fine */
    sqlite3_stmt *rest = NULL;
    if (sqlite3_prepare_v2(h, tail, (int)(sql + len - tail), &rest, NULL) == SQLITE_OK &&
        !rest)
      tail = NULL;
    sqlite3_finalize(rest);
  }
  if (tail && tail < sql + len) {
    sqlite3_finalize(*g);
    *g = NULL;
    return luaL_error(L, "db:q runs one statement; found more after it: "
                         "'%s'", tail);
  }
  /* A read-only connection's main DB cannot change, but VACUUM INTO
   * writes a new file from it: a statement that writes is refused there. */
  if (sqlite3_db_readonly(h, "main") == 1 && !sqlite3_stmt_readonly(*g) &&
      !sqlite3_stmt_isexplain(*g) && /* EXPLAIN only describes the statement */
      !pragma_read(sqlite3_sql(*g))) {
    sqlite3_finalize(*g);
    *g = NULL;
    return luaL_error(L, "db:q: the DB is open read-only and this statement writes: '%s'", sql);
  }
  int nparams = sqlite3_bind_parameter_count(*g);
  if (nparams != nargs) {
    sqlite3_finalize(*g);
    *g = NULL;
    return luaL_error(L, "db:q: the SQL takes %d value(s) to bind, %d given",
                      nparams, nargs);
  }
  for (int i = 1; i <= nargs; i++) {
    int idx = i + 2, rc = SQLITE_OK;
    int64_t iv;
    switch (lua_type(L, idx)) {
    case LUA_TNUMBER: {
      lua_Number v = lua_tonumber(L, idx);
      if (isnan(v))
        rc = sqlite3_bind_null(*g, i);
      else if (to_int64(v, &iv))
        rc = sqlite3_bind_int64(*g, i, iv);
      else
        rc = sqlite3_bind_double(*g, i, v);
      break;
    }
    case LUA_TSTRING: {
      size_t n;
      const char *s = lua_tolstring(L, idx, &n);
      rc = sqlite3_bind_text(*g, i, s, (int)n, SQLITE_TRANSIENT);
      break;
    }
    case LUA_TBOOLEAN:
      rc = sqlite3_bind_int(*g, i, lua_toboolean(L, idx));
      break;
    case LUA_TTABLE: /* {real = x}, checked above */
      lua_getfield(L, idx, "real");
      rc = sqlite3_bind_double(*g, i, lua_tonumber(L, -1));
      lua_pop(L, 1);
      break;
    default:
      rc = sqlite3_bind_null(*g, i);
      break;
    }
    if (rc != SQLITE_OK) return raise_stmt(L, u, g, sql);
  }

  int ncol = sqlite3_column_count(*g), nrow = 0, rc;
  /* Row keys: the column names, a repeated one suffixed with its position
   * ("id", "id (3)"), so no column overwrites another in the row tables. */
  lua_createtable(L, ncol, 0);
  int keys = lua_gettop(L);
  for (int c = 0; c < ncol; c++) {
    const char *name = sqlite3_column_name(*g, c);
    int repeated = 0;
    for (int e = 0; e < c && !repeated; e++)
      repeated = strcmp(name, sqlite3_column_name(*g, e)) == 0;
    if (repeated)
      lua_pushfstring(L, "%s (%d)", name, c + 1);
    else
      lua_pushstring(L, name);
    lua_rawseti(L, keys, c + 1);
  }
  lua_insert(L, -2); /* the rows table back on top, the keys below it */
  keys = lua_gettop(L) - 1;
  while ((rc = sqlite3_step(*g)) == SQLITE_ROW) {
    lua_createtable(L, 0, ncol);
    for (int c = 0; c < ncol; c++) {
      switch (sqlite3_column_type(*g, c)) {
      case SQLITE_INTEGER: {
        /* Past 2^53 the decimal string: a printed id is never rounded. */
        sqlite3_int64 v = sqlite3_column_int64(*g, c);
        if (v > INT53_MAX || v < -INT53_MAX)
          lua_pushstring(L, (const char *)sqlite3_column_text(*g, c));
        else
          lua_pushnumber(L, (lua_Number)v);
        break;
      }
      case SQLITE_FLOAT:
        lua_pushnumber(L, sqlite3_column_double(*g, c));
        break;
      case SQLITE_TEXT:
      case SQLITE_BLOB: {
        const void *p = sqlite3_column_blob(*g, c);
        lua_pushlstring(L, p ? p : "", (size_t)sqlite3_column_bytes(*g, c));
        break;
      }
      default:
        continue; /* NULL: leave the key absent */
      }
      lua_rawgeti(L, keys, c + 1);
      lua_insert(L, -2);
      lua_rawset(L, -3);
    }
    lua_rawseti(L, -2, ++nrow);
  }
  if (rc != SQLITE_DONE) return raise_stmt(L, u, g, sql);
  /* rows.columns: the row keys in column order (NULL cells are absent from
   * the row tables, so this is the only place they show). */
  lua_pushvalue(L, keys);
  lua_setfield(L, -2, "columns");
  lua_remove(L, keys);
  int writes = !sqlite3_stmt_readonly(*g);
  sqlite3_finalize(*g);
  *g = NULL;
  if (!writes) return 1;
  lua_pushnumber(L, (lua_Number)sqlite3_changes(h));
  return 2;
}

/* db:run_id() -> the run the last begin_run began and no end_run ended,
 * or nil: how a caller interrupted as begin_run returned (a signal's hook
 * fires before the id is stored) finds the row it must close. */
static int
l_db_run_id(lua_State *L)
{
  l_db *u = check_open(L);
  if (u->run_id == VSA_DB_NULL) lua_pushnil(L);
  else lua_pushnumber(L, (lua_Number)u->run_id);
  return 1;
}

/* db:path() -> the path given to db_open */
static int
l_db_path(lua_State *L)
{
  l_db *u = check_open(L);
  lua_pushstring(L, vsa_db_path(u->db));
  return 1;
}

/* db:close(); closing twice is fine. */
static int
l_db_close(lua_State *L)
{
  l_db *u = check_db(L);
  vsa_db_close(u->db);
  u->db = NULL;
  u->run_id = VSA_DB_NULL;
  return 0;
}

static int
l_db_tostring(lua_State *L)
{
  l_db *u = check_db(L);
  if (!u->db)
    lua_pushstring(L, "vsa.Db(closed)");
  else
    lua_pushfstring(L, "vsa.Db(%s%s)", vsa_db_path(u->db),
                    vsa_db_readonly(u->db) ? ", read-only" : "");
  return 1;
}

static const luaL_Reg db_methods[] = {
  {"begin_run", l_db_begin_run},
  {"end_run", l_db_end_run},
  {"log", l_db_log},
  {"q", l_db_q},
  {"run_id", l_db_run_id},
  {"path", l_db_path},
  {"close", l_db_close},
  {NULL, NULL},
};

static const luaL_Reg db_meta[] = {
  {"__gc", l_db_close},
  {"__tostring", l_db_tostring},
  {NULL, NULL},
};

/* vsalab.same_file(a, b) -> whether paths a and b name one existing file
 * (same device and inode: links and relative paths included). Used to keep
 * a report from being written over the results DB. */
static int
l_same_file(lua_State *L)
{
  const char *a = luaL_checkstring(L, 1), *b = luaL_checkstring(L, 2);
  struct stat sa, sb;
  lua_pushboolean(L, stat(a, &sa) == 0 && stat(b, &sb) == 0 && sa.st_dev == sb.st_dev &&
                         sa.st_ino == sb.st_ino);
  return 1;
}

/* vsalab.file_type(path) -> 'file', 'directory', 'link', 'other' (a
 * device, FIFO or socket) or nil when nothing is there; a link is not
 * followed. Used to keep a report from replacing /dev/null or a link, or
 * from waiting forever on a FIFO it reads. */
static int
l_file_type(lua_State *L)
{
  const char *path = luaL_checkstring(L, 1);
  struct stat st;
  if (lstat(path, &st) != 0) {
    lua_pushnil(L);
    return 1;
  }
  lua_pushstring(L, S_ISREG(st.st_mode)   ? "file"
                    : S_ISDIR(st.st_mode) ? "directory"
                    : S_ISLNK(st.st_mode) ? "link"
                                          : "other");
  return 1;
}

void
vsa_lua_open_db(lua_State *L)
{
  luaL_newmetatable(L, VSA_DB_MT);
  luaL_setfuncs(L, db_meta, 0);
  lua_newtable(L);
  luaL_setfuncs(L, db_methods, 0);
  lua_setfield(L, -2, "__index");
  lua_pop(L, 1);

  luaL_newmetatable(L, VSA_DB_STMT_MT);
  lua_pushcfunction(L, l_stmt_gc);
  lua_setfield(L, -2, "__gc");
  lua_pop(L, 1);

  lua_pushcfunction(L, l_db_open);
  lua_setfield(L, -2, "db_open");
  lua_pushcfunction(L, l_same_file);
  lua_setfield(L, -2, "same_file");
  lua_pushcfunction(L, l_file_type);
  lua_setfield(L, -2, "file_type");
  /* vsalab.db_schema_version: the schema version this build writes. */
  lua_pushinteger(L, VSA_DB_SCHEMA_VERSION);
  lua_setfield(L, -2, "db_schema_version");
}
