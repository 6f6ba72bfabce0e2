/* host.h — the embedded LuaJIT state: module setup and protected calls. */
#ifndef VSA_HOST_H
#define VSA_HOST_H

#include <lua.h>

#define VSA_MAX_CONTEXT 32

typedef struct {
  const char *db_path;  /* results DB for this invocation */
  const char *context[VSA_MAX_CONTEXT]; /* --context "key=value" pairs */
  int ncontext;
  const char *resume;   /* --resume RUN: continue that run, as any command names one (NULL: a new run) */
  double point_timeout; /* --point-timeout seconds (0: none) */
  const char *timing;   /* --timing hot|cold|graph (NULL: the script's choice) */
  int device;           /* CUDA ordinal for new tensors */
  long long seed;       /* run seed, handed to scripts as vsalab.context.seed */
  int seed_given;       /* --seed was on the command line (--resume checks it) */
  const char *devices;  /* --devices all|0,1,3: one worker per GPU (NULL: this process) */
  int shard_index;      /* --shard I/N: run the I-th of N slices (shard_count 0: all) */
  int shard_count;
  const char *sweep_id; /* --sweep-id: the logical sweep this run belongs to */
  int check;            /* --check: experiments validate their arguments and stop */
  const char *script;   /* script path, or NULL */
  int argc;             /* script arguments */
  char **argv;
  const char *argv0;    /* the program as it was called (NULL: "vsalab") */
  int run_argc;         /* the words after `vsalab run`, for the resume hint */
  char **run_argv;      /* after an interrupt (vsalab.run.interrupted_note) */
} vsa_host_options;

/* A new Lua state with the standard libraries, the `vsalab` module (C core
 * plus the embedded lua/vsalab modules) preloaded and set as a global, and
 * vsalab.context filled from opts. NULL (with a message on stderr) if the
 * state cannot be made. */
lua_State *vsa_host_new(const vsa_host_options *opts);

/* Run a script file with `arg` set (arg[0] = script, arg[1..] = args). On
 * error prints the message and the Lua traceback to stderr and returns 1;
 * returns 0 on success; 2 when the script cannot be read (a usage error).
 * A run stopped by a signal prints the message without a traceback and,
 * when it closed a run row, how to resume it; it returns 130 for SIGINT
 * (128 + SIGINT, as a shell reports Ctrl-C), 141 when stdout's reader
 * left, else 1. The run row (if the script began one) is closed as
 * 'finished', 'failed' or 'interrupted'. With --resume, the run's seed and
 * timing are taken first (vsalab.run.adopt_resume); a missing run or one
 * that ran another script, seed, arguments or timing prints why and
 * returns 2 without running the script. */
int vsa_host_run_script(lua_State *L, const vsa_host_options *opts);

/* Run a command implemented in Lua: require(module).main({args...}) and
 * return the integer it returns as the exit status (1 with a traceback on
 * stderr if it raises). */
int vsa_host_run_module(lua_State *L, const char *module, int argc, char **argv);

/* Call the function on top of the stack with nargs arguments under a
 * traceback handler (SIGINT/SIGTERM raise "interrupted!" meanwhile);
 * returns the lua_pcall code, leaving results or the message. */
int vsa_host_docall(lua_State *L, int nargs, int nres);

/* Whether the last error came from SIGINT/SIGTERM. */
int vsa_host_interrupted(void);

/* An interactive prompt (src/cli/repl.c): line editing and history through
 * libedit; returns the exit status. */
int vsa_repl(lua_State *L);

/* Close the run row (if one was begun) with status and error text. */
int vsa_host_finish(lua_State *L, const char *status, const char *err);

/* The message of the last error vsa_host_run_module printed ("failed" if
 * none), for the run row of a command that fails. */
const char *vsa_host_last_error(void);

#endif
