/* host.c — the embedded LuaJIT state (host.h).
 *
 * Modules: the C core is registered as package.preload["vsalab.core"]; every
 * lua/vsalab/NAME.lua file is compiled into the binary (cmake/embed.cmake) and
 * preloaded under its module name, so build/vsalab runs from any directory.
 * With VSALAB_LUA_DIR set, modules are read from that directory instead
 * (edit Lua without rebuilding). Scripts run under a message handler that
 * adds a traceback; SIGINT sets a one-shot hook that raises "interrupted!" at
 * the next Lua instruction (luajit.c's trick), so the run is closed cleanly.
 */
#include "host.h"

#include <lauxlib.h>
#include <lualib.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "embedded.h"
#include "l_tensor.h"
#include "lua_api.h"

#ifndef VSA_VERSION
#define VSA_VERSION "0.0.0"
#endif
#include "git_rev.h" /* generated at build time: VSA_GIT_REV */
#ifndef VSA_NVCC_FLAGS
#define VSA_NVCC_FLAGS "unknown"
#endif

#include "check.h"

static lua_State *signal_state;
/* Set by SIGINT/SIGTERM/SIGHUP/SIGUSR1/SIGPIPE and by the point timer; the
 * flags live in check.c so long C loops can poll them (vsa_poll_stop). */
#define interrupted vsa_interrupt_flag
#define timed_out vsa_timeout_flag
static volatile sig_atomic_t pipe_closed; /* SIGPIPE: stdout's reader left */
static struct timespec first_signal;
static volatile sig_atomic_t first_sender; /* the first signal's si_pid (0: the terminal) */

// ----------------------------------------------------------------------------
// interrupts

static void
interrupt_hook(lua_State *L, lua_Debug *ar)
{
  (void)ar;
  lua_sethook(L, NULL, 0, 0);
  /* An interrupt or timeout a C loop raised already (vsa_poll_stop) is not
   * raised again: here that would be on the error handler's call, "error in
   * error handling". */
  if (interrupted && !vsa_interrupt_raised) luaL_error(L, "%s", vsa_interrupt_message());
  if (timed_out) {
    timed_out = 0;
    luaL_error(L, "point timeout!");
  }
}

/* The point timer ran out: raise "point timeout!" at the next Lua
 * instruction (a long C call finishes first). */
static void
on_alarm(int sig)
{
  (void)sig;
  timed_out = 1;
  if (signal_state)
    lua_sethook(signal_state, interrupt_hook,
                LUA_MASKCALL | LUA_MASKRET | LUA_MASKCOUNT, 1);
}

/* vsalab.set_point_timeout(seconds): arm (0: disarm) the timer behind
 * --point-timeout; experiments arm it around each point. */
static int
l_set_point_timeout(lua_State *L)
{
  double t = luaL_checknumber(L, 1);
  if (!(t >= 0 && t < 1e7)) return luaL_error(L, "set_point_timeout: seconds must be in [0, 1e7)");
  struct itimerval it = {{0, 0}, {(time_t)t, (suseconds_t)((t - (time_t)t) * 1e6)}};
  if (t > 0 && it.it_value.tv_sec == 0 && it.it_value.tv_usec == 0) it.it_value.tv_usec = 1;
  if (t == 0) {
    /* Disarm, and drop a timeout that fired but has not been raised yet,
     * so it cannot surface outside the point it belonged to. */
    setitimer(ITIMER_REAL, &it, NULL);
    timed_out = 0;
    if (!interrupted && signal_state) lua_sethook(signal_state, NULL, 0, 0);
    return 0;
  }
  timed_out = 0;
  signal(SIGALRM, on_alarm);
  setitimer(ITIMER_REAL, &it, NULL);
  return 0;
}

/* First SIGINT/SIGTERM: raise "interrupted!" at the next Lua instruction,
 * so the script unwinds and the run is closed as 'interrupted'. A second one
 * exits at once, except the same interrupt sent twice: within 0.2 s of the
 * first (a terminal's pair, whose sender is the kernel), or the same signal
 * from the same process within 2 s (`timeout` and Slurm send one to the
 * process and one to its group, and a loaded host can put more than 0.2 s
 * between them; a person's second `kill` from one shell after 2 s still
 * forces the exit). */
static void
on_signal(int sig, siginfo_t *info, void *uctx)
{
  (void)uctx;
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  const int sender = info && info->si_code == SI_USER ? (int)info->si_pid : 0;
  if (sig == SIGPIPE) {
    /* Every later write fails again: never a reason to die at once. */
    pipe_closed = 1;
    if (interrupted) return;
  } else if (interrupted) {
    double dt = (now.tv_sec - first_signal.tv_sec) +
                (now.tv_nsec - first_signal.tv_nsec) * 1e-9;
    const int same = sig == interrupted && sender != 0 && sender == first_sender;
    if (dt > (same ? 2.0 : 0.2)) {
      signal(sig, SIG_DFL);
      raise(sig);
    }
    return;
  }
  interrupted = sig;
  first_signal = now;
  first_sender = sender;
  if (signal_state)
    lua_sethook(signal_state, interrupt_hook,
                LUA_MASKCALL | LUA_MASKRET | LUA_MASKCOUNT, 1);
}

/* vsalab.interrupt_pending() -> whether a signal asked this call to stop
 * (the pcall wrapper re-raises the interrupt a script's pcall caught). */
static int
l_interrupt_pending(lua_State *L)
{
  lua_pushboolean(L, interrupted != 0);
  return 1;
}

/* pcall and xpcall in a script cannot swallow an interrupt: a caught
 * "interrupted!" is raised again, so the script stops and the run ends
 * 'interrupted' (a point timeout is caught as before: experiments skip the
 * point). vsalab's own modules (chunk names vsalab/NAME.lua) get the error
 * back as usual: they catch interrupts to clean up (stop workers, disarm
 * the point timer) and raise them again themselves. */
static const char pcall_guard[] =
    "local pending, raw_pcall, raw_xpcall, err, getinfo = ...\n"
    "local function library()\n"
    "  local i = getinfo(3, 'S')\n"
    "  local src = i and i.source or ''\n"
    "  return src:find('^@vsalab/') or src:find('/vsalab/[%w_]+%.lua$')\n"
    "end\n"
    "local function pass(ok, ...)\n"
    "  if not ok and pending() and not library() then err((...), 0) end\n"
    "  return ok, ...\n"
    "end\n"
    "pcall = function(f, ...) return pass(raw_pcall(f, ...)) end\n"
    "xpcall = function(f, h, ...) return pass(raw_xpcall(f, h, ...)) end\n";

// ----------------------------------------------------------------------------
// module loading

static int
open_core(lua_State *L)
{
  lua_newtable(L);
  vsa_lua_open_tensor(L);
  vsa_lua_open_bsa(L);
  vsa_lua_open_bench(L);
  vsa_lua_open_db(L);
  vsa_lua_open_gemm(L);
  vsa_lua_open_check(L);
  vsa_lua_open_proc(L);
  vsa_lua_open_vsa_lists(L);
  vsa_lua_open_plugin(L);
  vsa_lua_open_npy(L);
  lua_pushstring(L, VSA_VERSION);
  lua_setfield(L, -2, "version");
  lua_pushstring(L, VSA_GIT_REV);
  lua_setfield(L, -2, "git_rev");
  lua_pushstring(L, VSA_NVCC_FLAGS);
  lua_setfield(L, -2, "nvcc_flags");
  lua_pushcfunction(L, l_set_point_timeout);
  lua_setfield(L, -2, "set_point_timeout");
  lua_pushcfunction(L, l_interrupt_pending);
  lua_setfield(L, -2, "interrupt_pending");
  return 1;
}

/* package.preload loader for an embedded module (upvalue: its index). */
static int
load_embedded(lua_State *L)
{
  const vsa_embedded_file *f = &vsa_embedded[lua_tointeger(L, lua_upvalueindex(1))];
  if (luaL_loadbuffer(L, f->text, f->size, f->origin) != 0) return lua_error(L);
  lua_pushstring(L, f->name);
  lua_call(L, 1, 1);
  return 1;
}

static void
install_modules(lua_State *L)
{
  lua_getglobal(L, "package");
  lua_getfield(L, -1, "preload");
  lua_pushcfunction(L, open_core);
  lua_setfield(L, -2, "vsalab.core");
  const char *dir = getenv("VSALAB_LUA_DIR");
  if (dir && *dir) {
    /* Development: lua/vsalab/x.lua found as vsalab.x from the tree. */
    lua_getfield(L, -2, "path");
    lua_pushfstring(L, "%s/?.lua;%s/?/init.lua;%s", dir, dir,
                    lua_tostring(L, -1));
    lua_setfield(L, -4, "path");
    lua_pop(L, 1);
  } else {
    for (int i = 0; vsa_embedded[i].name; i++) {
      if (strcmp(vsa_embedded[i].kind, "lua") != 0) continue;
      lua_pushinteger(L, i);
      lua_pushcclosure(L, load_embedded, 1);
      lua_setfield(L, -2, vsa_embedded[i].name);
    }
  }
  lua_pop(L, 2);
}

/* A usage error (vsalab.usage.error: a table with usage = true) is the
 * user's mistake, not a bug: it travels as it is, without a traceback.
 * Read raw: a script's error table may have an __index that raises, and
 * these run outside any protected call (a raise there is a LuaJIT panic). */
static int
raw_flag(lua_State *L, int idx, const char *key)
{
  if (!lua_istable(L, idx)) return 0;
  lua_pushstring(L, key);
  lua_rawget(L, idx < 0 ? idx - 1 : idx);
  int u = lua_toboolean(L, -1);
  lua_pop(L, 1);
  return u;
}

static int
is_usage_error(lua_State *L, int idx)
{
  return raw_flag(L, idx, "usage");
}

/* vsalab.usage.fail's error (plain = true): a runtime failure printed
 * without a traceback, exit 1 (an experiment that measured nothing). */
static int
is_plain_error(lua_State *L, int idx)
{
  return raw_flag(L, idx, "plain");
}

/* The message of the error at idx (a usage or plain error's text, or the
 * string). */
static const char *
error_text(lua_State *L, int idx)
{
  if (is_usage_error(L, idx) || is_plain_error(L, idx)) {
    lua_pushliteral(L, "message");
    lua_rawget(L, idx < 0 ? idx - 1 : idx);
    const char *m = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : NULL;
    lua_pop(L, 1); /* still referenced by the error table */
    return m ? m : "usage error";
  }
  const char *m = lua_tostring(L, idx);
  return m ? m : "(error object is not a string)";
}

static int
traceback(lua_State *L)
{
  if (is_usage_error(L, 1) || is_plain_error(L, 1)) return 1;
  const char *msg = lua_tostring(L, 1);
  if (!msg) {
    if (luaL_callmeta(L, 1, "__tostring") && lua_type(L, -1) == LUA_TSTRING)
      return 1;
    msg = lua_pushfstring(L, "(error object is a %s value)", luaL_typename(L, 1));
  }
  luaL_traceback(L, L, msg, 1);
  return 1;
}

/* Call the function on top with nargs under the traceback handler, with
 * SIGINT/SIGTERM turned into "interrupted!" errors while it runs. */
int
vsa_host_docall(lua_State *L, int nargs, int nres)
{
  int base = lua_gettop(L) - nargs;
  lua_pushcfunction(L, traceback);
  lua_insert(L, base);
  /* The state the handlers may hook: only while a call runs (a SIGPIPE
   * at the exit flush comes after lua_close). */
  lua_State *prev_state = signal_state;
  signal_state = L;
  static const int sigs[] = {SIGINT, SIGTERM, SIGHUP, SIGUSR1, SIGPIPE};
  /* `nohup vsalab run ...`: a SIGHUP ignored when vsalab started stays
   * ignored, so the run outlives the terminal as asked. */
  static int hup_ignored = -1;
  if (hup_ignored < 0) {
    struct sigaction old;
    hup_ignored = sigaction(SIGHUP, NULL, &old) == 0 && old.sa_handler == SIG_IGN;
  }
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = on_signal;
  sa.sa_flags = SA_SIGINFO | SA_RESTART; /* signal()'s restarting, plus the sender */
  /* One handler at a time: a signal inside another's handler, between
   * `interrupted = sig` and `first_signal = now`, would read a stale first
   * signal's time and sender and force the exit. */
  sigemptyset(&sa.sa_mask);
  for (int i = 0; i < 5; i++) sigaddset(&sa.sa_mask, sigs[i]);
  sigaddset(&sa.sa_mask, SIGALRM);
  for (int i = 0; i < 5; i++)
    if (!(sigs[i] == SIGHUP && hup_ignored)) sigaction(sigs[i], &sa, NULL);
  interrupted = 0;
  vsa_interrupt_raised = 0;
  int rc = lua_pcall(L, nargs, nres, base);
  /* SIGPIPE stays caught: a write to a closed stdout after the script
   * (the exit flush) must not kill the process before it has said how the
   * run ended. */
  for (int i = 0; i < 4; i++)
    if (!(sigs[i] == SIGHUP && hup_ignored)) signal(sigs[i], SIG_DFL);
  lua_sethook(L, NULL, 0, 0); /* an interrupt the script caught: not for the next call */
  signal_state = prev_state;
  lua_remove(L, base);
  if (rc != 0) lua_gc(L, LUA_GCCOLLECT, 0);
  return rc;
}


static int
setup(lua_State *L)
{
  const vsa_host_options *o = lua_touserdata(L, 1);
  luaL_openlibs(L);
  install_modules(L);
  vsa_lua_set_current_device(o->device);
  lua_getglobal(L, "require");
  lua_pushstring(L, "vsalab");
  lua_call(L, 1, 1);
  lua_pushvalue(L, -1);
  lua_setglobal(L, "vsalab");
  lua_getfield(L, -1, "run_finish");
  lua_setfield(L, LUA_REGISTRYINDEX, "vsalab.run_finish");
  if (luaL_loadbuffer(L, pcall_guard, sizeof pcall_guard - 1, "=pcall_guard") != 0)
    lua_error(L);
  lua_pushcfunction(L, l_interrupt_pending);
  lua_getglobal(L, "pcall");
  lua_getglobal(L, "xpcall");
  lua_getglobal(L, "error");
  lua_getglobal(L, "debug");
  lua_getfield(L, -1, "getinfo");
  lua_remove(L, -2);
  lua_call(L, 5, 0);
  /* vsalab.context: what this invocation was asked to do. */
  lua_newtable(L);
  lua_pushstring(L, o->db_path);
  lua_setfield(L, -2, "db_path");
  lua_pushinteger(L, o->device);
  lua_setfield(L, -2, "device");
  lua_pushnumber(L, (lua_Number)o->seed);
  lua_setfield(L, -2, "seed");
  lua_pushboolean(L, o->seed_given);
  lua_setfield(L, -2, "seed_given");
  if (o->script) {
    lua_pushstring(L, o->script);
    lua_setfield(L, -2, "script");
  }
  lua_createtable(L, o->argc, 0);
  for (int i = 0; i < o->argc; i++) {
    lua_pushstring(L, o->argv[i]);
    lua_rawseti(L, -2, i + 1);
  }
  lua_setfield(L, -2, "args");
  lua_pushstring(L, o->argv0 ? o->argv0 : "vsalab");
  lua_setfield(L, -2, "argv0");
  if (o->run_argv) {
    lua_createtable(L, o->run_argc, 0);
    for (int i = 0; i < o->run_argc; i++) {
      lua_pushstring(L, o->run_argv[i]);
      lua_rawseti(L, -2, i + 1);
    }
    lua_setfield(L, -2, "command");
  }
  lua_newtable(L);
  for (int i = 0; i < o->ncontext; i++) {
    const char *eq = strchr(o->context[i], '=');
    lua_pushlstring(L, o->context[i], (size_t)(eq - o->context[i]));
    lua_pushstring(L, eq + 1);
    lua_settable(L, -3);
  }
  lua_setfield(L, -2, "pairs");
  if (o->resume) {
    lua_pushstring(L, o->resume);
    lua_setfield(L, -2, "resume");
  }
  if (o->timing) {
    lua_pushstring(L, o->timing);
    lua_setfield(L, -2, "timing");
  }
  if (o->devices) {
    lua_pushstring(L, o->devices);
    lua_setfield(L, -2, "devices");
  }
  if (o->shard_count > 0) {
    lua_createtable(L, 0, 2);
    lua_pushinteger(L, o->shard_index);
    lua_setfield(L, -2, "index");
    lua_pushinteger(L, o->shard_count);
    lua_setfield(L, -2, "count");
    lua_setfield(L, -2, "shard");
  }
  if (o->sweep_id) {
    lua_pushstring(L, o->sweep_id);
    lua_setfield(L, -2, "sweep_id");
  }
  if (o->point_timeout > 0) {
    lua_pushnumber(L, o->point_timeout);
    lua_setfield(L, -2, "point_timeout");
  }
  if (o->check) {
    lua_pushboolean(L, 1);
    lua_setfield(L, -2, "check");
  }
  lua_pushinteger(L, (lua_Integer)getpid());
  lua_setfield(L, -2, "pid");
  /* When the invocation started (UTC, SQLite's format): the run row begins
   * at the first log, but its started_at is this. */
  struct timespec now;
  clock_gettime(CLOCK_REALTIME, &now);
  struct tm tm;
  gmtime_r(&now.tv_sec, &tm);
  char when[64];
  snprintf(when, sizeof when, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
           tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
           (int)(now.tv_nsec / 1000000));
  lua_pushstring(L, when);
  lua_setfield(L, -2, "started_at");
  char host[256] = "unknown";
  (void)gethostname(host, sizeof host - 1);
  lua_pushstring(L, host);
  lua_setfield(L, -2, "host");
  /* The running binary, so scripts and tests can start another vsalab. */
  char exe[4096];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n > 0) {
    exe[n] = 0;
    lua_pushstring(L, exe);
    lua_setfield(L, -2, "exe");
  }
  lua_setfield(L, -2, "context");
  return 0;
}

lua_State *
vsa_host_new(const vsa_host_options *opts)
{
  lua_State *L = luaL_newstate();
  if (!L) {
    fprintf(stderr, "vsalab: cannot create a Lua state (out of memory)\n");
    return NULL;
  }
  if (lua_cpcall(L, setup, (void *)opts) != 0) {
    fprintf(stderr, "vsalab: %s\n", lua_tostring(L, -1));
    lua_close(L);
    return NULL;
  }
  return L;
}

/* Close the run row if the script began one, through the run_finish kept
 * in the registry at setup (a script may overwrite the global vsalab).
 * Returns -1 when closing failed. */
static int
finish_run(lua_State *L, const char *status, const char *err)
{
  lua_getfield(L, LUA_REGISTRYINDEX, "vsalab.run_finish");
  if (!lua_isfunction(L, -1)) {
    lua_pop(L, 1);
    return 0;
  }
  lua_pushstring(L, status);
  if (err) lua_pushstring(L, err);
  else lua_pushnil(L);
  if (vsa_host_docall(L, 2, 0) != 0) {
    fprintf(stderr, "vsalab: closing the run failed: %s\n", error_text(L, -1));
    lua_pop(L, 1);
    return -1;
  }
  return 0;
}

/* Exit status of a run stopped because stdout's reader went away (`| head`):
 * 128 + SIGPIPE, as the shell reports other CLIs killed by it. */
#define EXIT_PIPE (128 + SIGPIPE)

/* After a run stopped by signal sig was closed: say how to resume it
 * (vsalab.run.interrupted_note, when it closed a run row) and return the
 * exit status, 128 + SIGINT for Ctrl-C, 1 for the other signals (a second
 * signal's forced exit is 128 + its number: tests tell the two apart). */
static void
print_run_note(lua_State *L, const char *which)
{
  lua_getglobal(L, "require");
  lua_pushstring(L, "vsalab.run");
  if (vsa_host_docall(L, 1, 1) == 0) {
    lua_getfield(L, -1, which);
    lua_remove(L, -2);
    if (vsa_host_docall(L, 0, 1) == 0 && lua_type(L, -1) == LUA_TSTRING)
      fprintf(stderr, "vsalab: %s\n", lua_tostring(L, -1));
  }
  lua_pop(L, 1);
}

static int
interrupted_exit(lua_State *L, int sig)
{
  print_run_note(L, "interrupted_note");
  return sig == SIGINT ? 128 + SIGINT : 1;
}

int
vsa_host_run_script(lua_State *L, const vsa_host_options *o)
{
  if (o->resume) { /* the run's seed and timing, before the script reads them */
    lua_getglobal(L, "require");
    lua_pushstring(L, "vsalab.run");
    int rc = vsa_host_docall(L, 1, 1);
    if (rc == 0) {
      lua_getfield(L, -1, "adopt_resume");
      lua_remove(L, -2);
      rc = vsa_host_docall(L, 0, 0);
    }
    if (rc != 0) { /* a usage error: the message, without the traceback */
      const char *msg = error_text(L, -1);
      const char *tb = strstr(msg, "\nstack traceback:");
      fprintf(stderr, "vsalab: %.*s\n", tb ? (int)(tb - msg) : (int)strlen(msg), msg);
      lua_pop(L, 1);
      return 2;
    }
  }
  lua_createtable(L, o->argc, 1);
  lua_pushstring(L, o->script);
  lua_rawseti(L, -2, 0);
  for (int i = 0; i < o->argc; i++) {
    lua_pushstring(L, o->argv[i]);
    lua_rawseti(L, -2, i + 1);
  }
  lua_setglobal(L, "arg");
  int rc = luaL_loadfile(L, o->script);
  if (rc == LUA_ERRFILE) { /* no such script: the command line's mistake */
    fprintf(stderr, "vsalab: %s\n", lua_tostring(L, -1));
    lua_pop(L, 1);
    return 2;
  }
  if (rc == 0) {
    for (int i = 0; i < o->argc; i++) lua_pushstring(L, o->argv[i]);
    rc = vsa_host_docall(L, o->argc, 0);
  }
  /* What the script printed meets its reader while the run is open: a
   * reader gone (`vsalab run smoke.lua | true`) closes it 'interrupted',
   * as a larger output would have (SIGPIPE stays caught; the handler sets
   * the flags). */
  fflush(stdout);
  /* Read before finish_run: its own protected call resets the flags. */
  int stopped = interrupted, piped = pipe_closed;
  if (rc != 0) {
    int usage = is_usage_error(L, -1);
    const char *msg = error_text(L, -1);
    /* stdout closed under us (`vsalab run ... | head`): stop quietly. An
     * interrupt is no bug: its message without the traceback. */
    if (stopped && strstr(msg, "interrupted!")) msg = strstr(msg, "interrupted!");
    const char *tb = stopped ? strstr(msg, "\nstack traceback:") : NULL;
    if (!(piped && stopped))
      fprintf(stderr, "vsalab: %.*s\n", tb ? (int)(tb - msg) : (int)strlen(msg), msg);
    finish_run(L, stopped ? "interrupted" : "failed", msg);
    lua_pop(L, 1);
    if (piped && stopped) return EXIT_PIPE;
    if (stopped) return interrupted_exit(L, stopped);
    return usage ? 2 : 1;
  }
  /* An interrupt the script swallowed (coroutine.resume) still ends the run
   * 'interrupted'. */
  if (stopped) {
    finish_run(L, "interrupted", vsa_interrupt_message());
    return piped ? EXIT_PIPE : interrupted_exit(L, stopped);
  }
  if (finish_run(L, "finished", NULL) != 0) return 1;
  /* Where the rows went: the run id and DB the next command needs. */
  print_run_note(L, "finished_note");
  return 0;
}

/* The message of the last error vsa_host_run_module printed. */
static char last_error[1024] = "";

const char *
vsa_host_last_error(void)
{
  return last_error[0] ? last_error : "failed";
}

/* Print the error on top (quietly nothing when stdout was closed under
 * us) and return the exit status: 2 for a usage error, 141 after SIGPIPE,
 * else 1. */
static int
print_module_error(lua_State *L)
{
  const char *msg = error_text(L, -1);
  snprintf(last_error, sizeof last_error, "%s", msg);
  if (pipe_closed && interrupted) return EXIT_PIPE;
  fprintf(stderr, "vsalab: %s\n", msg);
  if (interrupted == SIGINT) return 128 + SIGINT; /* Ctrl-C: 130, as for a run */
  return is_usage_error(L, -1) && !interrupted ? 2 : 1;
}

int
vsa_host_run_module(lua_State *L, const char *module, int argc, char **argv)
{
  lua_getglobal(L, "require");
  lua_pushstring(L, module);
  if (vsa_host_docall(L, 1, 1) != 0) return print_module_error(L);
  lua_getfield(L, -1, "main");
  lua_createtable(L, argc, 0);
  for (int i = 0; i < argc; i++) {
    lua_pushstring(L, argv[i]);
    lua_rawseti(L, -2, i + 1);
  }
  if (vsa_host_docall(L, 1, 1) != 0) return print_module_error(L);
  int rc = lua_isnumber(L, -1) ? (int)lua_tointeger(L, -1) : 0;
  lua_pop(L, 2);
  /* A command that failed because Ctrl-C stopped it (a long query)
   * exits 130, as a run does; other signals keep its status. */
  if (rc != 0 && interrupted == SIGINT && !pipe_closed) rc = 128 + SIGINT;
  return rc;
}

int
vsa_host_finish(lua_State *L, const char *status, const char *err)
{
  return finish_run(L, status, err);
}

int
vsa_host_interrupted(void)
{
  return interrupted;
}
