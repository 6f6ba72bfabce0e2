/* check.h — one error path for the C core.
 *
 * C functions of the core return 0 on success and -1 on failure, after
 * recording a message with vsa_fail(). The Lua bindings turn that message into
 * a Lua error (luaL_error); plain C callers (main, db.c) print it. Nothing in
 * the core prints or exits: a REPL must survive every error.
 */
#ifndef VSA_CHECK_H
#define VSA_CHECK_H

#include <cuda_runtime_api.h>

/* Record a printf-style message as the current error; always returns -1. */
int vsa_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* The message recorded by the last vsa_fail() (never NULL). */
const char *vsa_last_error(void);

/* Record a CUDA error with its name, text and the caller's file:line. */
int vsa_fail_cuda(cudaError_t e, const char *what, const char *file, int line);
/* Whether the error recorded last was cudaErrorMemoryAllocation (callers
 * that can free memory retry then). */
int vsa_last_error_is_oom(void);

/* Set by the host's signal handlers (src/cli/host.c): an interrupt (the
 * signal's number: SIGINT, SIGTERM, SIGHUP, SIGUSR1, SIGPIPE; 0 when none)
 * or the --point-timeout timer. Long host loops call vsa_poll_stop() every
 * few million elements. */
extern _Atomic int vsa_interrupt_flag;
extern _Atomic int vsa_timeout_flag;
/* The error an interrupt raises, naming its signal: "interrupted!
 * (SIGTERM)" (plain "interrupted!" for an unnamed one). */
const char *vsa_interrupt_message(void);
/* 0, or -1 with vsa_interrupt_message() (an interrupt stays pending, so the
 * run still ends 'interrupted', and vsa_interrupt_raised is set: the Lua
 * hook the signal armed must not raise it a second time, inside the error
 * handler) or "point timeout!" (consumed) recorded. */
int vsa_poll_stop(void);
extern _Atomic int vsa_interrupt_raised;
/* How many elements a host loop handles between two vsa_poll_stop() calls. */
#define VSA_POLL_EVERY ((int64_t)1 << 22)

/* Run a CUDA call; on failure record it and return -1 from the caller. */
#define CUDA_TRY(call)                                                       \
  do {                                                                       \
    cudaError_t vsa_e_ = (call);                                             \
    if (vsa_e_ != cudaSuccess)                                               \
      return vsa_fail_cuda(vsa_e_, #call, __FILE__, __LINE__);               \
  } while (0)

/* Run a core call that returns 0 / -1; propagate -1. */
#define VSA_TRY(call)                                                        \
  do {                                                                       \
    if ((call) != 0) return -1;                                              \
  } while (0)

#endif
