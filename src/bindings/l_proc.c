/* l_proc.c — child processes for `vsalab run --devices` (lua/vsalab/devices.lua).
 *
 * The coordinator starts one worker process per GPU and talks to it over a
 * socket pair (the worker's fd 3) while reading its stderr through a pipe.
 * These are thin wrappers over posix_spawn, socketpair, poll, read, send,
 * waitpid and kill; the scheduling lives in Lua.
 *
 *   pid, msg_fd, err_fd = vsalab.proc_spawn(argv, env)
 *   ready = vsalab.proc_poll({fd...}, timeout_ms)   -- fds readable or hung up
 *   s = vsalab.proc_read(fd)          -- bytes; "" if interrupted; nil at EOF
 *   ok, err = vsalab.proc_write(fd, s)
 *   vsalab.proc_close(fd)
 *   how, code = vsalab.proc_wait(pid [, block])  -- nil while running;
 *               "exit", status or "signal", signo
 *   vsalab.proc_kill(pid, "INT" | "TERM" | "KILL" [, group])  -- group: kill(-pid)
 *   t = vsalab.proc_now()             -- monotonic seconds
 *
 * Every descriptor is close-on-exec, so one worker never holds another's
 * pipes (a worker's EOF would otherwise never come).
 */
#define _GNU_SOURCE /* pipe2 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "lua_api.h"

extern char **environ;

#define MAX_ARGS 1024

/* argv table (1..n strings) into a NULL-terminated array of its strings
 * (they stay owned by the table at idx, which the caller keeps). */
static int
table_strings(lua_State *L, int idx, const char *what, const char **out, int max)
{
  luaL_checktype(L, idx, LUA_TTABLE);
  int n = (int)lua_objlen(L, idx);
  if (n < 1 || n >= max) return vsa_lua_errorf(L, "proc_spawn: %s needs 1 to %d strings", what, max - 1);
  for (int i = 1; i <= n; i++) {
    lua_rawgeti(L, idx, i);
    if (lua_type(L, -1) != LUA_TSTRING)
      return vsa_lua_errorf(L, "proc_spawn: %s[%d] must be a string", what, i);
    out[i - 1] = lua_tostring(L, -1);
    lua_pop(L, 1); /* the string stays alive in the table */
  }
  out[n] = NULL;
  return n;
}

/* vsalab.proc_spawn(argv, env) -> pid, msg_fd, err_fd. argv[1] is the
 * program path; env {NAME = value} is added to (or replaces in) this
 * process's environment. The child gets stdin from /dev/null, the write end
 * of one pipe as stdout and stderr (err_fd reads it) and one end of a
 * socket pair as fd 3 (msg_fd is the other end). */
static int
l_proc_spawn(lua_State *L)
{
  const char *argv[MAX_ARGS];
  table_strings(L, 1, "argv", argv, MAX_ARGS);
  luaL_checktype(L, 2, LUA_TTABLE);
  /* The environment: ours, less the names env sets, plus env. */
  int nenv = 0;
  for (char **e = environ; *e; e++) nenv++;
  int nextra = 0;
  lua_pushnil(L);
  while (lua_next(L, 2)) {
    if (lua_type(L, -2) != LUA_TSTRING || lua_type(L, -1) != LUA_TSTRING)
      return vsa_lua_errorf(L, "proc_spawn: env must map names to strings");
    nextra++;
    lua_pop(L, 1);
  }
  const char **envp = lua_newuserdata(L, (size_t)(nenv + nextra + 1) * sizeof *envp);
  int k = 0;
  for (char **e = environ; *e; e++) {
    const char *eq = strchr(*e, '=');
    if (!eq) continue;
    lua_pushlstring(L, *e, (size_t)(eq - *e));
    lua_rawget(L, 2);
    int replaced = !lua_isnil(L, -1);
    lua_pop(L, 1);
    if (!replaced) envp[k++] = *e;
  }
  lua_pushnil(L);
  while (lua_next(L, 2)) {
    lua_pushfstring(L, "%s=%s", lua_tostring(L, -2), lua_tostring(L, -1));
    envp[k++] = lua_tostring(L, -1);
    lua_insert(L, 3); /* keep the string below the iteration */
    lua_pop(L, 1);
  }
  envp[k] = NULL;

  int sv[2], ep[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
    return vsa_lua_errorf(L, "proc_spawn: socketpair: %s", strerror(errno));
  if (pipe2(ep, O_CLOEXEC) != 0) {
    int e = errno;
    close(sv[0]);
    close(sv[1]);
    return vsa_lua_errorf(L, "proc_spawn: pipe: %s", strerror(e));
  }
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&fa, ep[1], 1);
  posix_spawn_file_actions_adddup2(&fa, ep[1], 2);
  posix_spawn_file_actions_adddup2(&fa, sv[1], 3);
  pid_t pid;
  int rc = posix_spawn(&pid, argv[0], &fa, NULL, (char *const *)argv, (char *const *)envp);
  posix_spawn_file_actions_destroy(&fa);
  close(sv[1]);
  close(ep[1]);
  if (rc != 0) {
    close(sv[0]);
    close(ep[0]);
    return vsa_lua_errorf(L, "proc_spawn: cannot start %s: %s", argv[0], strerror(rc));
  }
  lua_pushinteger(L, pid);
  lua_pushinteger(L, sv[0]);
  lua_pushinteger(L, ep[0]);
  return 3;
}

static int
check_fd(lua_State *L, int idx)
{
  lua_Number n = luaL_checknumber(L, idx);
  if (!(n >= 0 && n < 1 << 20) || n != (int)n)
    return vsa_lua_errorf(L, "bad argument #%d (expected a file descriptor)", idx);
  return (int)n;
}

/* vsalab.proc_poll({fd...}, timeout_ms) -> {fd...} readable or hung up
 * ({} on timeout or when a signal arrived). */
static int
l_proc_poll(lua_State *L)
{
  luaL_checktype(L, 1, LUA_TTABLE);
  int n = (int)lua_objlen(L, 1);
  int timeout = (int)luaL_checkinteger(L, 2);
  if (n > 4096) return vsa_lua_errorf(L, "proc_poll: at most 4096 fds");
  struct pollfd *p = lua_newuserdata(L, (size_t)(n > 0 ? n : 1) * sizeof *p);
  for (int i = 0; i < n; i++) {
    lua_rawgeti(L, 1, i + 1);
    p[i].fd = check_fd(L, -1);
    p[i].events = POLLIN;
    p[i].revents = 0;
    lua_pop(L, 1);
  }
  int rc = poll(p, (nfds_t)n, timeout);
  if (rc < 0 && errno != EINTR) return vsa_lua_errorf(L, "proc_poll: %s", strerror(errno));
  lua_newtable(L);
  int k = 0;
  for (int i = 0; rc > 0 && i < n; i++)
    if (p[i].revents) {
      lua_pushinteger(L, p[i].fd);
      lua_rawseti(L, -2, ++k);
    }
  return 1;
}

/* vsalab.proc_read(fd) -> up to 64 KiB of bytes, "" when a signal
 * interrupted the read, nil at end of file (or a broken connection). */
static int
l_proc_read(lua_State *L)
{
  int fd = check_fd(L, 1);
  char buf[65536];
  ssize_t r = read(fd, buf, sizeof buf);
  if (r < 0 && (errno == EINTR || errno == EAGAIN)) {
    lua_pushliteral(L, "");
    return 1;
  }
  if (r <= 0) {
    lua_pushnil(L);
    return 1;
  }
  lua_pushlstring(L, buf, (size_t)r);
  return 1;
}

/* vsalab.proc_write(fd, s) -> true, or nil, why (the peer is gone). A
 * socket is written with MSG_NOSIGNAL: a dead peer is an answer, not a
 * SIGPIPE. */
static int
l_proc_write(lua_State *L)
{
  int fd = check_fd(L, 1);
  size_t len;
  const char *s = luaL_checklstring(L, 2, &len);
  while (len > 0) {
    ssize_t w = send(fd, s, len, MSG_NOSIGNAL);
    if (w < 0 && errno == ENOTSOCK) w = write(fd, s, len);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) {
      lua_pushnil(L);
      lua_pushstring(L, strerror(errno));
      return 2;
    }
    s += w;
    len -= (size_t)w;
  }
  lua_pushboolean(L, 1);
  return 1;
}

static int
l_proc_close(lua_State *L)
{
  close(check_fd(L, 1));
  return 0;
}

/* vsalab.proc_wait(pid [, block]) -> nil while it runs (block: wait), else
 * "exit", status or "signal", signo. */
static int
l_proc_wait(lua_State *L)
{
  pid_t pid = (pid_t)luaL_checkinteger(L, 1);
  int block = lua_toboolean(L, 2);
  if (pid <= 0) return vsa_lua_errorf(L, "proc_wait: pid must be positive");
  int st;
  pid_t r;
  do r = waitpid(pid, &st, block ? 0 : WNOHANG);
  while (r < 0 && errno == EINTR && block);
  if (r == 0 || (r < 0 && errno == EINTR)) return 0;
  if (r < 0) return vsa_lua_errorf(L, "proc_wait(%d): %s", (int)pid, strerror(errno));
  if (WIFSIGNALED(st)) {
    lua_pushliteral(L, "signal");
    lua_pushinteger(L, WTERMSIG(st));
  } else {
    lua_pushliteral(L, "exit");
    lua_pushinteger(L, WEXITSTATUS(st));
  }
  return 2;
}

/* vsalab.proc_kill(pid, "INT" | "TERM" | "KILL") -> true, or false when
 * there is no such process. */
static int
l_proc_kill(lua_State *L)
{
  pid_t pid = (pid_t)luaL_checkinteger(L, 1);
  const char *name = luaL_checkstring(L, 2);
  int sig = strcmp(name, "INT") == 0 ? SIGINT : strcmp(name, "TERM") == 0 ? SIGTERM
          : strcmp(name, "KILL") == 0 ? SIGKILL : 0;
  if (!sig) return vsa_lua_errorf(L, "proc_kill: signal must be INT, TERM or KILL, got '%s'", name);
  if (pid <= 0) return vsa_lua_errorf(L, "proc_kill: pid must be positive");
  /* group: the whole process group whose id is pid (a child started as
   * the leader of its own group, e.g. through setsid). */
  lua_pushboolean(L, kill(lua_toboolean(L, 3) ? -pid : pid, sig) == 0);
  return 1;
}

/* vsalab.proc_now() -> seconds on the monotonic clock (for ETAs). */
static int
l_proc_now(lua_State *L)
{
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  lua_pushnumber(L, (lua_Number)t.tv_sec + t.tv_nsec * 1e-9);
  return 1;
}

/* vsalab.proc_self_kill(): SIGKILL this process (tests: a worker that dies
 * mid-point without any chance to clean up). */
static int
l_proc_self_kill(lua_State *L)
{
  (void)L;
  fflush(NULL);
  kill(getpid(), SIGKILL);
  return 0;
}

static const luaL_Reg functions[] = {
  {"proc_spawn", l_proc_spawn}, {"proc_poll", l_proc_poll},
  {"proc_read", l_proc_read},   {"proc_write", l_proc_write},
  {"proc_close", l_proc_close}, {"proc_wait", l_proc_wait},
  {"proc_kill", l_proc_kill},   {"proc_self_kill", l_proc_self_kill},
  {"proc_now", l_proc_now},
  {NULL, NULL},
};

void
vsa_lua_open_proc(lua_State *L)
{
  luaL_register(L, NULL, functions);
}
