/* main.c — the vsalab command line.
 *
 *   vsalab run [--db PATH] [--device N] [--seed N] SCRIPT [args...]
 *   vsalab --version | help
 *
 * Exit status: 0 on success, 1 when the script raised an error (the message
 * and Lua traceback go to stderr), 2 on a usage error (a script that cannot
 * be read included), 130 when Ctrl-C (SIGINT) stopped a run.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <lua.h>

#include "host.h"

#ifndef VSA_VERSION
#define VSA_VERSION "0.0.0"
#endif
#include "git_rev.h" /* generated at build time: VSA_GIT_REV */

/* vsalab's own options of run (and, but for the last three, of repl). */
#define RUN_OPTIONS \
    "  --db PATH     results database (default: results.db here)\n" \
    "  --device N    CUDA device for new tensors (default: 0)\n" \
    "  --seed N      run seed handed to the script, in [0, 2^48) (default: 1234)\n" \
    "  --context K=V a key=value pair recorded with the run (repeatable)\n" \
    "  --resume RUN  continue run RUN (its seed and timing; same script and args):\n" \
    "                points it already measured are skipped\n" \
    "  --point-timeout S  give up a sweep point after S seconds (row skipped)\n" \
    "  --timing MODE hot (back-to-back bursts, default), cold (L2 flushed before\n" \
    "                each sample), graph (CUDA-graph replay) or sustained (3 s of\n" \
    "                back-to-back calls: the clocks a training job gets) for experiments\n" \
    "  --devices all|0,1,3  one worker process per GPU, sweep points to the\n" \
    "                first free one (longest first); one run row, rows name their GPU\n" \
    "  --shard I/N   only the I-th of N slices of the sweep (0 <= I < N), by point\n" \
    "                hash; 'slurm' takes them from SLURM_ARRAY_TASK_ID/_COUNT\n" \
    "  --sweep-id ID the logical sweep this run is a part of (shards share it)\n" \
    "  --check       check the script's arguments and stop (run only): an\n" \
    "                experiment plans its points and exits 0 before it needs a\n" \
    "                GPU, measures or writes the DB; a bad argument exits 2\n"

static const char usage[] =
    "vsalab — block-sparse attention backward kernels: run, check, measure.\n"
    "\n"
    "usage:\n"
    "  vsalab run [options] SCRIPT [args...]  run a Lua experiment script\n"
    "  vsalab repl [options] [-i SCRIPT [args...]]  a Lua prompt with vsalab loaded\n"
    "                                         (also plain `vsalab` on a terminal)\n"
    "  vsalab compare [--db PATH] [--floor-pct 2] [--floor-pct-host 50] [--floor-ms 0.005]\n"
    "                 [--floor-ms-host 0.05] [--partial] A[:KERNEL] B[:KERNEL]\n"
    "                                         speed and error verdicts per point of\n"
    "                                         two runs (ids, latest, latest~N, a\n"
    "                                         revision); exit 1 on SLOW/NEW FAIL/MISSING\n"
    "                                         (RUN:KERNEL: one kernel, e.g. 7:sm90a 7:triton)\n"
    "  vsalab runs [--db PATH] [--format F] [--limit N]\n"
    "                                         list the latest N runs (50; F: table csv json markdown)\n"
    "  vsalab show [--db PATH] [--format F] RUN   a run's environment and rows\n"
    "  vsalab query [--db PATH] [--format F] \"SQL\" [values]   any read-only SQL\n"
    "  vsalab report [--db PATH] [-o FILE] [RUN...]  one self-contained HTML report\n"
    "                                         (two RUN[:KERNEL] sides: a comparison first)\n"
    "  vsalab merge OUT.db IN.db...           combine shard DBs into OUT (one transaction;\n"
    "                                         a run already in OUT is skipped)\n"
    "  vsalab rerun [--db PATH] [--allow-changed] ROW\n"
    "                                         measure a result row's point again\n"
    "                                         with the same inputs (a new run; a\n"
    "                                         plug-in rebuilt since needs --allow-changed)\n"
    "  vsalab --version                       print the version\n"
    "  vsalab help [COMMAND]                  print this text, or COMMAND's usage\n"
    "  vsalab COMMAND --help                  that command's usage (also -h)\n"
    "\n"
    "options (before SCRIPT):\n" RUN_OPTIONS
    "\n"
    "Backwards: reference (CPU, GPU), sm90a (Hopper: H100, H200) and sm100a\n"
    "(Blackwell: compiled and emulated, never run on Blackwell; VSALAB_SM100_EMU=1\n"
    "adds its emulation on a compute capability 9.0 GPU as the test backend\n"
    "sm100a-emu).\n"
    "Script arguments reach Lua as `arg` (arg[0] is the script) and as `...`.\n"
    "The `vsalab` module is loaded as a global; docs/lua-api.md documents its API.\n";

/* `run --help`, `repl --help`: printed on stdout, exit 0. */
static const char run_usage[] =
    "usage: vsalab run [options] SCRIPT [args...]\n"
    "runs a Lua script with the vsalab module loaded; experiments take -a axis\n"
    "overrides and key=value options after SCRIPT (docs/cli.md, docs/experiments.md).\n"
    "\n"
    "options (before SCRIPT):\n" RUN_OPTIONS;
static const char repl_usage[] =
    "usage: vsalab repl [options] [-i SCRIPT [args...]]\n"
    "a Lua prompt with vsalab loaded; -i runs SCRIPT first and keeps its globals\n"
    "\n"
    "options: --db, --device, --seed, --context, --resume, --point-timeout and\n"
    "--timing, as for run (vsalab run --help).\n";

/* The program as it was called (argv[0]), for the commands vsalab suggests. */
static const char *argv0 = "vsalab";

/* parse_options' result when it printed the command's --help: exit 0. */
#define HELP_SHOWN (-1)

static int
parse_long(const char *s, long long lo, long long *out)
{
  char *end;
  long long v = strtoll(s, &end, 10);
  if (!*s || *end || v < lo) return -1;
  *out = v;
  return 0;
}

/* --devices all | N,N,...: distinct ordinals (resolved against the GPUs
 * present by lua/vsalab/devices.lua). 0 or 2 after printing why. */
static int
parse_devices(const char *val)
{
  if (strcmp(val, "all") == 0) return 0;
  char seen[1025] = {0};
  const char *p = val;
  for (;;) {
    char *end;
    long n = strtol(p, &end, 10);
    if (end == p || n < 0 || n > 1024 || (*end && *end != ',') || *p == '-' || *p == '+') {
      fprintf(stderr, "vsalab: --devices expects 'all' or GPU ordinals like 0,1,3, got '%s'\n", val);
      return 2;
    }
    if (seen[n]++) {
      fprintf(stderr, "vsalab: --devices lists GPU %ld twice in '%s'\n", n, val);
      return 2;
    }
    if (!*end) return 0;
    p = end + 1;
  }
}

/* A non-negative decimal integer of at most 9 digits, or -1. */
static long
small_int(const char *s)
{
  if (!s || !*s || strlen(s) > 9 || strspn(s, "0123456789") != strlen(s)) return -1;
  return strtol(s, NULL, 10);
}

/* --shard I/N (0 <= I < N) or --shard slurm: the array task's slice, from
 * SLURM_ARRAY_TASK_ID - SLURM_ARRAY_TASK_MIN and SLURM_ARRAY_TASK_COUNT. */
static int
parse_shard(const char *val, int *index, int *count)
{
  long i, n;
  if (strcmp(val, "slurm") == 0) {
    const char *id = getenv("SLURM_ARRAY_TASK_ID"), *cnt = getenv("SLURM_ARRAY_TASK_COUNT");
    const char *min = getenv("SLURM_ARRAY_TASK_MIN");
    if (!id || !cnt) {
      fprintf(stderr, "vsalab: --shard slurm needs SLURM_ARRAY_TASK_ID and "
              "SLURM_ARRAY_TASK_COUNT (run it as a task of a Slurm job array)\n");
      return 2;
    }
    long lo = min ? small_int(min) : 0;
    i = small_int(id);
    n = small_int(cnt);
    if (n < 1 || n > 100000) { /* the I/N form's limit; the hint below needs a count */
      fprintf(stderr, "vsalab: --shard slurm: SLURM_ARRAY_TASK_COUNT '%s' is not a task count in "
              "[1, 100000]\n", cnt);
      return 2;
    }
    if (i < 0 || lo < 0 || i - lo < 0 || i - lo >= n) {
      fprintf(stderr, "vsalab: --shard slurm: task %s of %s (min %s) is not a slice; the array"
              " must be contiguous, e.g. --array=0-%ld\n", id, cnt, min ? min : "0", n - 1);
      return 2;
    }
    i -= lo;
  } else {
    const char *slash = strchr(val, '/');
    char head[16];
    if (!slash || (size_t)(slash - val) >= sizeof head) i = -1;
    else {
      memcpy(head, val, (size_t)(slash - val));
      head[slash - val] = 0;
      i = small_int(head);
    }
    n = slash ? small_int(slash + 1) : -1;
    if (i < 0 || n < 1 || i >= n || n > 100000) {
      fprintf(stderr, "vsalab: --shard expects I/N with 0 <= I < N <= 100000 (or 'slurm'),"
              " got '%s'\n", val);
      return 2;
    }
  }
  *index = (int)i;
  *count = (int)n;
  return 0;
}

/* Options shared by run and repl, from argv[*i] on; stops at the first
 * non-option (left in *i). Returns 0, 2 after printing a usage error, or
 * HELP_SHOWN after printing help (--help, -h) on stdout. */
static int
parse_options(int argc, char **argv, vsa_host_options *po, int *pi, const char *help)
{
  vsa_host_options o = *po;
  int i = *pi;
  for (; i < argc && argv[i][0] == '-' && strcmp(argv[i], "-i") != 0; i++) {
    const char *opt = argv[i];
    if (strcmp(opt, "--") == 0) {
      i++;
      break;
    }
    if (strcmp(opt, "--help") == 0 || strcmp(opt, "-h") == 0) {
      fputs(help, stdout);
      return HELP_SHOWN;
    }
    if (strcmp(opt, "--check") == 0) { /* the one option without a value */
      o.check = 1;
      continue;
    }
    if (strcmp(opt, "--db") && strcmp(opt, "--device") && strcmp(opt, "--seed") &&
        strcmp(opt, "--context") && strcmp(opt, "--resume") &&
        strcmp(opt, "--point-timeout") && strcmp(opt, "--timing") &&
        strcmp(opt, "--devices") && strcmp(opt, "--shard") && strcmp(opt, "--sweep-id")) {
      fprintf(stderr, "vsalab: unknown option %s (see vsalab help)\n", opt);
      return 2;
    }
    if (i + 1 >= argc) {
      fprintf(stderr, "vsalab: option %s needs a value\n", opt);
      return 2;
    }
    const char *val = argv[++i];
    long long n;
    if (strcmp(opt, "--resume") == 0) {
      /* An id, latest, latest~N or a revision: vsalab.run resolves it. */
      if (!*val) {
        fprintf(stderr, "vsalab: --resume expects a run (an id, latest, latest~N or a revision prefix)\n");
        return 2;
      }
      o.resume = val;
    } else if (strcmp(opt, "--point-timeout") == 0) {
      char *end;
      double t = strtod(val, &end);
      if (!*val || *end || !(t > 0 && t < 1e7)) {
        fprintf(stderr, "vsalab: --point-timeout expects seconds > 0 and below 1e7 (about 115 days), got '%s'\n", val);
        return 2;
      }
      o.point_timeout = t;
    } else if (strcmp(opt, "--timing") == 0) {
      if (strcmp(val, "hot") && strcmp(val, "cold") && strcmp(val, "graph") &&
          strcmp(val, "sustained")) {
        fprintf(stderr, "vsalab: --timing expects hot, cold, graph or sustained, got '%s'\n", val);
        return 2;
      }
      o.timing = val;
    } else if (strcmp(opt, "--devices") == 0) {
      if (parse_devices(val) != 0) return 2;
      o.devices = val;
    } else if (strcmp(opt, "--shard") == 0) {
      if (parse_shard(val, &o.shard_index, &o.shard_count) != 0) return 2;
    } else if (strcmp(opt, "--sweep-id") == 0) {
      if (!*val || strlen(val) > 200 || strpbrk(val, " \t\n\r/'\"")) {
        fprintf(stderr, "vsalab: --sweep-id expects a name without spaces, quotes or '/'"
                " (at most 200 characters), got '%s'\n", val);
        return 2;
      }
      o.sweep_id = val;
    } else if (strcmp(opt, "--context") == 0) {
      if (!strchr(val, '=') || val[0] == '=' || o.ncontext >= VSA_MAX_CONTEXT) {
        fprintf(stderr, "vsalab: --context expects key=value (at most %d), got '%s'\n",
                VSA_MAX_CONTEXT, val);
        return 2;
      }
      if (strncmp(val, "timing=", 7) == 0) { /* the run's context records --timing there */
        fprintf(stderr, "vsalab: --context key 'timing' is reserved for --timing\n");
        return 2;
      }
      o.context[o.ncontext++] = val;
    } else if (strcmp(opt, "--db") == 0) {
      if (!*val) {
        fprintf(stderr, "vsalab: --db expects a path\n");
        return 2;
      }
      o.db_path = val;
    } else if (strcmp(opt, "--device") == 0) {
      if (parse_long(val, 0, &n) != 0 || n > 1024) {
        fprintf(stderr, "vsalab: --device expects a device number, got '%s'\n", val);
        return 2;
      }
      o.device = (int)n;
    } else if (strcmp(opt, "--seed") == 0) {
      /* Tensor seeds derive as 16*seed + k: keep them exact in a double. */
      if (parse_long(val, 0, &n) != 0 || n >= (1LL << 48)) {
        fprintf(stderr, "vsalab: --seed expects an integer in [0, 2^48), got '%s'\n", val);
        return 2;
      }
      o.seed = n;
      o.seed_given = 1;
    }
  }
  *po = o;
  *pi = i;
  return 0;
}

static int
cmd_run(int argc, char **argv)
{
  vsa_host_options o = {.db_path = "results.db", .device = 0, .seed = 1234};
  int i = 0;
  int rc = parse_options(argc, argv, &o, &i, run_usage);
  if (rc) return rc == HELP_SHOWN ? 0 : rc;

  if (i >= argc) {
    fprintf(stderr, "vsalab: run needs a SCRIPT (see vsalab help)\n");
    return 2;
  }
  o.script = argv[i];
  o.argc = argc - i - 1;
  o.argv = argv + i + 1;
  o.argv0 = argv0;
  o.run_argc = argc;
  o.run_argv = argv;
  if (o.devices && o.resume) {
    fprintf(stderr, "vsalab: --devices does not take --resume (resume on one GPU with --device)\n");
    return 2;
  }
  if (o.check && o.resume) {
    fprintf(stderr, "vsalab: --check does not take --resume (check the command without it)\n");
    return 2;
  }
  if (o.db_path && strcmp(o.db_path, ":memory:") == 0) { /* every row gone at exit */
    fprintf(stderr, "vsalab: run --db :memory: would keep no measured row; name a file\n");
    return 2;
  }
  lua_State *L = vsa_host_new(&o);
  if (!L) return 1;
  /* --devices: this process coordinates one worker process per GPU, each
   * a `vsalab run` of the same command line (lua/vsalab/devices.lua). */
  /* --check plans the points here, one process, whatever --devices says. */
  if (o.devices && !o.check) rc = vsa_host_run_module(L, "vsalab.devices", argc, argv);
  else rc = vsa_host_run_script(L, &o);
  lua_close(L);
  return rc;
}

/* vsalab repl [options] [-i SCRIPT [args...]] */
static int
cmd_repl(int argc, char **argv)
{
  vsa_host_options o = {.db_path = "results.db", .device = 0, .seed = 1234};
  int i = 0;
  int rc = parse_options(argc, argv, &o, &i, repl_usage);
  if (rc) return rc == HELP_SHOWN ? 0 : rc;
  if (o.devices || o.shard_count || o.sweep_id || o.check) {
    fprintf(stderr, "vsalab: --devices, --shard, --sweep-id and --check are options of run, not repl\n");
    return 2;
  }
  if (i < argc && strcmp(argv[i], "-i") != 0) {
    fprintf(stderr, "vsalab: repl takes options and -i SCRIPT [args] (see vsalab help)\n");
    return 2;
  }
  if (i < argc) {
    if (i + 1 >= argc) {
      fprintf(stderr, "vsalab: -i needs a SCRIPT\n");
      return 2;
    }
    o.script = argv[i + 1];
    o.argc = argc - i - 2;
    o.argv = argv + i + 2;
  }
  lua_State *L = vsa_host_new(&o);
  if (!L) return 1;
  /* -i: run the script first; its globals stay for the prompt, and an
   * error in it is printed without leaving. */
  if (o.script) vsa_host_run_script(L, &o);
  rc = vsa_repl(L);
  vsa_host_finish(L, "finished", NULL);
  lua_close(L);
  return rc;
}

/* Commands written in Lua: require(module).main(args) gives the exit
 * status. with_name passes the command name as the first argument; logs
 * marks commands that log a run of their own (into the --db they read). */
typedef struct {
  const char *name, *module;
  int with_name, logs;
} lua_command;

static const lua_command lua_commands[] = {
    {"runs", "vsalab.query", 1, 0},      {"show", "vsalab.query", 1, 0},
    {"query", "vsalab.query", 1, 0},     {"report", "vsalab.htmlreport", 0, 0},
    {"compare", "vsalab.compare", 0, 0}, {"rerun", "vsalab.rerun", 0, 1},
    {"merge", "vsalab.merge", 0, 0},
    {NULL, NULL, 0, 0}};

/* What runs, show, query, compare... print is their product: a write to
 * stdout that failed (a full disk, a closed stdout) is exit 1 and said, not
 * a silent exit 0. A reader gone away (141, EPIPE) stays quiet, and is 141
 * also when it left before the exit flush (an output that fit the buffer),
 * not a silent 0 with the output lost. */
static int
check_stdout(int rc)
{
  errno = 0;
  int flush_failed = fflush(stdout) != 0;
  int e = errno;
  if (!flush_failed && !ferror(stdout)) return rc;
  if (rc == 128 + SIGPIPE || e == EPIPE) return rc ? rc : 128 + SIGPIPE;
  fprintf(stderr, "vsalab: cannot write standard output%s%s\n", e ? ": " : "",
          e ? strerror(e) : "");
  return rc ? rc : 1;
}

static int
cmd_lua(const lua_command *c, int argc, char **argv)
{
  vsa_host_options o = {.db_path = "results.db", .device = 0, .seed = 0};
  for (int i = 2; c->logs && i + 1 < argc; i++)
    if (strcmp(argv[i], "--db") == 0) o.db_path = argv[i + 1];
  lua_State *L = vsa_host_new(&o);
  if (!L) return 1;
  int skip = c->with_name ? 1 : 2;
  int rc = vsa_host_run_module(L, c->module, argc - skip, argv + skip);
  /* A run the command began is closed whatever happened (a no-op if none). */
  if (c->logs)
    vsa_host_finish(L, rc == 0 ? "finished" : vsa_host_interrupted() ? "interrupted" : "failed",
                    rc == 0 ? NULL : vsa_host_last_error());
  lua_close(L);
  return check_stdout(rc);
}

/* Levenshtein distance of a and b, each at most 63 bytes (longer: 99). */
static int
edit_distance(const char *a, const char *b)
{
  size_t n = strlen(a), m = strlen(b);
  if (n > 63 || m > 63) return 99;
  int row[64];
  for (size_t j = 0; j <= m; j++) row[j] = (int)j;
  for (size_t i = 1; i <= n; i++) {
    int diag = row[0];
    row[0] = (int)i;
    for (size_t j = 1; j <= m; j++) {
      int up = row[j];
      int best = diag + (a[i - 1] != b[j - 1]);
      if (up + 1 < best) best = up + 1;
      if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
      row[j] = best;
      diag = up;
    }
  }
  return row[m];
}

/* The command nearest to a mistyped one (a typo's distance away: one edit
 * for a short word, a third of its length for a longer one), or NULL. */
static const char *
nearest_command(const char *word)
{
  static const char *const names[] = {"run", "repl", "help", NULL};
  const char *best = NULL;
  int best_d = 99;
  for (int i = 0; names[i]; i++) {
    int d = edit_distance(word, names[i]);
    if (d < best_d) best = names[i], best_d = d;
  }
  for (const lua_command *c = lua_commands; c->name; c++) {
    int d = edit_distance(word, c->name);
    if (d < best_d) best = c->name, best_d = d;
  }
  int limit = (int)strlen(word) / 3;
  return best_d <= (limit > 1 ? limit : 1) ? best : NULL;
}

int
main(int argc, char **argv)
{
  if (argc > 0 && argv[0]) argv0 = argv[0];
  if (argc < 2 && isatty(0) && isatty(1)) return cmd_repl(0, argv + 1);
  if (argc >= 2 && strcmp(argv[1], "repl") == 0) return cmd_repl(argc - 2, argv + 2);
  if (argc == 3 && strcmp(argv[1], "help") == 0) { /* vsalab help CMD: CMD --help */
    if (argv[2][0] == '-') { /* an option is no command (help --version printed the version) */
      fprintf(stderr, "vsalab: help takes a command, got the option '%s' (see vsalab help)\n", argv[2]);
      return 2;
    }
    char *help_argv[] = {argv[0], argv[2], "--help", NULL};
    return main(3, help_argv);
  }
  if (argc > 3 && strcmp(argv[1], "help") == 0) { /* a usage error, not the whole text and 0 */
    fprintf(stderr, "vsalab: help takes one command, got %d words (see vsalab help)\n", argc - 2);
    return 2;
  }
  if (argc < 2 || strcmp(argv[1], "help") == 0 || strcmp(argv[1], "--help") == 0 ||
      strcmp(argv[1], "-h") == 0) {
    /* Plain vsalab opens the REPL only on a terminal: piped input gets why,
     * in one line, not the whole help. */
    if (argc < 2) {
      fputs("vsalab: no command, and the REPL opens only on a terminal: `vsalab repl` reads "
            "piped input (`vsalab help` lists the commands)\n", stderr);
      return 2;
    }
    fputs(usage, stdout);
    return 0;
  }
  if (strcmp(argv[1], "-i") == 0) { /* the REPL's option, given without the command */
    fputs("vsalab: '-i' is the REPL's option: vsalab repl -i SCRIPT [args...]\n", stderr);
    return 2;
  }
  if (strcmp(argv[1], "--version") == 0) {
    printf("vsalab %s (%s)\n", VSA_VERSION, VSA_GIT_REV);
    return 0;
  }
  if (strcmp(argv[1], "run") == 0) return cmd_run(argc - 2, argv + 2);
  for (const lua_command *c = lua_commands; c->name; c++)
    if (strcmp(argv[1], c->name) == 0) return cmd_lua(c, argc, argv);
  const char *near = nearest_command(argv[1]);
  if (near)
    fprintf(stderr, "vsalab: unknown command '%s' (did you mean '%s'? see vsalab help)\n", argv[1], near);
  else
    fprintf(stderr, "vsalab: unknown command '%s' (see vsalab help)\n", argv[1]);
  return 2;
}
