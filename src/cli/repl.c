/* repl.c — `vsalab repl`: a LuaJIT prompt with the vsalab module loaded.
 *
 * Line editing, history (~/.vsalab_history) and tab completion of table
 * fields ("vsalab.ba<Tab>"; a function completes with its '(', a tensor's
 * methods after ':' and its properties after '.') come from libedit's
 * readline interface. A line is first tried as an expression (`return
 * <line>`; a leading '=' forces that) and its values are printed by
 * lua/vsalab/repl.lua (tensors print their summary, tables one level
 * deep); otherwise as a statement. `help` says what the prompt offers. A chunk whose only error is an
 * unexpected <eof> continues on the next line (">> "), as in luajit.c.
 * Errors print with their traceback and the prompt stays. Ctrl-C at the
 * prompt drops the current line; during a call it raises "interrupted!"
 * (host.c; the JIT is off at the prompt so even a tight loop stops); Ctrl-D
 * leaves.
 */
#include <lauxlib.h>
#include <lua.h>
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <editline/readline.h>

#include "host.h"

static sigjmp_buf prompt_jump;
static volatile sig_atomic_t at_prompt;
static volatile sig_atomic_t completing;
static lua_State *completion_state;

// ----------------------------------------------------------------------------
// Ctrl-C at the prompt: drop the line

/* Ctrl-C while Tab's lookup runs Lua (an __index that loops or loads a
 * slow module): raised inside that protected call, as luajit.c does. */
static void
completion_stop(lua_State *L, lua_Debug *ar)
{
  (void)ar;
  lua_sethook(L, NULL, 0, 0);
  luaL_error(L, "interrupted!");
}

static void
on_prompt_sigint(int sig)
{
  (void)sig;
  /* Never jump out of Lua: the state would keep the abandoned call's
   * frames (and a C frame pointer into the dead stack) forever. */
  if (completing) {
    lua_sethook(completion_state, completion_stop, LUA_MASKCALL | LUA_MASKRET | LUA_MASKCOUNT, 1);
    return;
  }
  if (at_prompt) siglongjmp(prompt_jump, 1);
}

// ----------------------------------------------------------------------------
// completion: the fields of the table named before the last '.' or ':'

static char **candidates;
static int ncandidates;

static void
clear_candidates(void)
{
  for (int i = 0; i < ncandidates; i++) free(candidates[i]);
  free(candidates);
  candidates = NULL;
  ncandidates = 0;
}

/* Push the value that dotted path names (e.g. "vsalab.problem"), or nil. */
static void
push_path(lua_State *L, const char *path, size_t len)
{
  lua_pushvalue(L, LUA_GLOBALSINDEX);
  size_t i = 0;
  while (i < len) {
    size_t j = i;
    while (j < len && path[j] != '.') j++;
    if (!lua_istable(L, -1)) break;
    lua_pushlstring(L, path + i, j - i);
    lua_gettable(L, -2);
    lua_remove(L, -2);
    i = j + 1;
  }
  if (i < len) {
    lua_pop(L, 1);
    lua_pushnil(L);
  }
}

/* The candidates for text (a light userdata at 1), under lua_cpcall: a
 * table's __index along the path may raise (a script's, or a lazy module
 * that fails to load), and an unprotected raise is a LuaJIT panic. */
static int
collect_in(lua_State *L)
{
  const char *text = lua_touserdata(L, 1);
  const char *sep = strrchr(text, '.');
  const char *colon = strrchr(text, ':');
  if (colon && (!sep || colon > sep)) sep = colon;
  /* After ':' only what can be called as a method: a userdata's methods,
   * a table's functions (t:shape would be an error). */
  int method_call = sep && *sep == ':';
  size_t base = sep ? (size_t)(sep - text) : 0;
  const char *prefix = sep ? sep + 1 : text;
  size_t plen = strlen(prefix);
  if (sep) push_path(L, text, base);
  else lua_pushvalue(L, LUA_GLOBALSINDEX);
  /* Where names come from: a table's own keys; a userdata's metatable
   * `methods` (keys, after ':' only: t:fill(...)) and `properties` (a
   * list, after '.' only: t.shape, t.dtype...); a table's metatable
   * `__complete` (a list: fields loaded on first use, such as
   * vsalab.cases). */
  int top = lua_gettop(L);
  if (lua_isuserdata(L, top) && lua_getmetatable(L, top)) {
    if (method_call) lua_getfield(L, -1, "methods");
    else lua_pushnil(L);
    if (method_call) lua_pushnil(L);
    else lua_getfield(L, -2, "properties");
    lua_remove(L, top + 1);
  } else if (lua_istable(L, top)) {
    lua_pushvalue(L, top);
    if (lua_getmetatable(L, top)) {
      lua_getfield(L, -1, "__complete");
      lua_remove(L, -2);
    }
  }
  int last = lua_gettop(L);
  for (int src = top + 1; src <= last; src++) {
    if (!lua_istable(L, src)) continue;
    int is_list = src == top + 2; /* properties / __complete: lists of names */
    int i = 0;
    int callable = 0; /* a function: completes with its call's '(' */
    lua_pushnil(L);
    for (;;) {
      if (is_list) {
        lua_pop(L, 1);
        lua_rawgeti(L, src, ++i);
        if (lua_isnil(L, -1)) {
          lua_pop(L, 1);
          break;
        }
      } else {
        if (lua_next(L, src) == 0) break;
        callable = lua_isfunction(L, -1);
        lua_pop(L, 1);
        if (method_call && !callable && src == top + 1 && lua_istable(L, top)) continue;
      }
      if (lua_type(L, -1) != LUA_TSTRING) continue;
      const char *k = lua_tostring(L, -1);
      if (strncmp(k, prefix, plen) != 0) continue;
      char **grown = realloc(candidates, sizeof *candidates * (ncandidates + 1));
      if (!grown) break;
      candidates = grown;
      size_t n = base + (sep ? 1 : 0) + strlen(k) + 2;
      candidates[ncandidates] = malloc(n);
      if (!candidates[ncandidates]) break;
      snprintf(candidates[ncandidates++], n, "%.*s%s%s", (int)(base + (sep ? 1 : 0)), text, k,
               callable ? "(" : "");
    }
  }
  lua_settop(L, top - 1);
  return 0;
}

/* Nothing to offer when looking the path up raised. */
static void
collect(const char *text)
{
  lua_State *L = completion_state;
  clear_candidates();
  completing = 1;
  int rc = lua_cpcall(L, collect_in, (void *)text);
  completing = 0;
  lua_sethook(L, NULL, 0, 0); /* a Ctrl-C that came as the lookup ended */
  if (rc != 0) {
    lua_pop(L, 1);
    clear_candidates();
  }
}

static char *
generator(const char *text, int state)
{
  static int next;
  if (state == 0) {
    collect(text);
    next = 0;
  }
  return next < ncandidates ? strdup(candidates[next++]) : NULL;
}

static char **
complete(const char *text, int start, int end)
{
  (void)start;
  (void)end;
  rl_completion_append_character = '\0';
  return rl_completion_matches(text, generator);
}

// ----------------------------------------------------------------------------
// the read-eval-print loop

/* 1 when the chunk's only fault is that it ended too early. */
static int
incomplete(lua_State *L, int status)
{
  if (status != LUA_ERRSYNTAX) return 0;
  size_t len;
  const char *msg = lua_tolstring(L, -1, &len);
  return len >= 7 && strstr(msg, "'<eof>'") == msg + len - 7;
}

/* Compile buf: as an expression first, then as a statement. Leaves the
 * function (or the error message) on the stack. An expression cut short
 * ("1 +") counts as unfinished when the statement reading fails too.
 * An expression that compiles is compiled once more as the argument list of
 * an identity function: `return f()` is a tail call, which cost `error("x")`
 * at the prompt its "stdin:1:" position. The newline ends a trailing comment. */
static int
compile(lua_State *L, const char *buf)
{
  const char *src = buf[0] == '=' ? buf + 1 : buf;
  lua_pushfstring(L, "return %s", src);
  int status = luaL_loadbuffer(L, lua_tostring(L, -1), lua_objlen(L, -1), "=stdin");
  lua_remove(L, -2);
  if (status == 0) {
    lua_pushfstring(L, "return (function(...) return ... end)(%s\n)", src);
    if (luaL_loadbuffer(L, lua_tostring(L, -1), lua_objlen(L, -1), "=stdin") == 0) {
      lua_remove(L, -2); /* the source */
      lua_remove(L, -2); /* the tail-calling function */
    } else {
      lua_pop(L, 2); /* "x;" reads as `return x;` only: keep that */
    }
    return 0;
  }
  if (buf[0] == '=') return status;
  int expr_unfinished = incomplete(L, status);
  lua_pop(L, 1);
  status = luaL_loadbuffer(L, buf, strlen(buf), "=stdin");
  if (status != 0 && expr_unfinished && !incomplete(L, status)) {
    lua_pop(L, 1);
    lua_pushliteral(L, "unfinished expression near '<eof>'");
  }
  return status;
}

static void
print_results(lua_State *L, int base)
{
  int n = lua_gettop(L) - base;
  if (n <= 0) return;
  lua_getfield(L, LUA_REGISTRYINDEX, "vsalab.repl_print");
  if (lua_isnil(L, -1)) {
    lua_pop(L, 1);
    lua_getglobal(L, "print");
  }
  lua_insert(L, base + 1);
  /* Under the host's handlers, as the statement was: a __tostring that
   * loops, or a long table of rows, must stop at Ctrl-C with the prompt
   * back, not die of SIGINT's default action (its run left 'running'). */
  if (vsa_host_docall(L, n, 0) != 0) {
    const char *msg = lua_tostring(L, -1);
    fprintf(stderr, "error printing results: %s\n", msg ? msg : "(error object is not a string)");
    fflush(stderr);
    lua_pop(L, 1);
  }
}

static const char *
history_path(void)
{
  static char path[4096];
  const char *home = getenv("HOME");
  if (!home || !*home) return NULL;
  snprintf(path, sizeof path, "%s/.vsalab_history", home);
  return path;
}

int
vsa_repl(lua_State *L)
{
  completion_state = L;
  rl_readline_name = "vsalab";
  rl_attempted_completion_function = complete;
  rl_basic_word_break_characters = " \t\n\"\\'`@$><=;|&{(,+-*/%^~#[]";
  const char *hist = history_path();
  using_history();
  if (hist) read_history(hist);
  /* The interrupt hook cannot stop a loop running as compiled machine code:
   * with the JIT off, Ctrl-C always reaches a running statement. */
  (void)luaL_dostring(L, "if jit then jit.off() end");
  /* A lazy `db` global: the results DB, opened read-only on first use. */
  (void)luaL_dostring(L,
    "db = setmetatable({}, {__index = function(t, k)\n"
    "  local path = vsalab.context.db_path\n"
    "  local f = io.open(path, 'rb')\n"
    "  if not f then error(string.format('no results DB at %s: `vsalab run "
    "experiments/smoke.lua` writes one, or start the REPL with --db PATH', path), 2) end\n"
    "  f:close()\n"
    "  local d = vsalab.db_open(path, {readonly = true})\n"
    "  rawset(_G, 'db', d)\n"
    "  local v = d[k]\n"
    "  if type(v) == 'function' then return function(_, ...) return v(d, ...) end end\n"
    "  return v\n"
    "end})");
  /* `help` (typed alone, or called): what the prompt offers. */
  (void)luaL_dostring(L, "help = require('vsalab.repl').help");
  /* How results print (lua/vsalab/repl.lua): query results as an aligned
   * table, other tables one level deep, everything else through print.
   * Kept in the registry, out of the user's globals. */
  (void)luaL_dostring(L, "return require('vsalab.repl').print");
  lua_setfield(L, LUA_REGISTRYINDEX, "vsalab.repl_print");
  /* Piped input has no Tab and no Ctrl-D to offer. */
  printf("vsalab %s — Lua with the vsalab module%s\n",
         lua_tostring(L, (lua_getglobal(L, "vsalab"), lua_getfield(L, -1, "version"), -1)),
         isatty(STDIN_FILENO) ? "; Tab completes, Ctrl-D leaves" : "");
  lua_pop(L, 2);
  struct sigaction sa, old;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_prompt_sigint;
  sigemptyset(&sa.sa_mask);
  char *buf = NULL;
  for (;;) {
    sigaction(SIGINT, &sa, &old);
    if (sigsetjmp(prompt_jump, 1)) {
      /* Ctrl-C while editing: drop what was typed. */
      at_prompt = 0;
      completing = 0;
      lua_sethook(L, NULL, 0, 0);
      printf("\n");
      free(buf);
      buf = NULL;
      continue;
    }
    at_prompt = 1;
    char *line = readline(buf ? ">> " : "> ");
    at_prompt = 0;
    sigaction(SIGINT, &old, NULL);
    if (!line && buf) { /* Ctrl-D inside a chunk: drop the chunk */
      /* Say what it lacked: the end of piped input dropped it silently. */
      int top = lua_gettop(L);
      compile(L, buf);
      printf("\n");
      fflush(stdout);
      fprintf(stderr, "%s (unfinished chunk dropped)\n",
              lua_tostring(L, -1) ? lua_tostring(L, -1) : "unfinished chunk");
      fflush(stderr);
      lua_settop(L, top);
      free(buf);
      buf = NULL;
      continue;
    }
    if (!line) break; /* Ctrl-D */
    if (!buf && !*line) {
      free(line);
      continue;
    }
    if (buf) {
      size_t n = strlen(buf) + strlen(line) + 2;
      char *joined = malloc(n);
      if (!joined) break;
      snprintf(joined, n, "%s\n%s", buf, line);
      free(buf);
      free(line);
      buf = joined;
    } else {
      buf = line;
    }
    int base = lua_gettop(L);
    int status = compile(L, buf);
    if (incomplete(L, status)) {
      lua_pop(L, 1);
      continue;
    }
    add_history(buf);
    if (status == 0) status = vsa_host_docall(L, 0, LUA_MULTRET);
    if (status == 0) {
      print_results(L, base);
    } else {
      fprintf(stderr, "%s\n", lua_tostring(L, -1) ? lua_tostring(L, -1) : "(error)");
      fflush(stderr);
    }
    lua_settop(L, base);
    free(buf);
    buf = NULL;
  }
  free(buf);
  printf("\n");
  if (hist) {
    stifle_history(1000);
    write_history(hist);
  }
  return 0;
}
