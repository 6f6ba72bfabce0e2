/* check.c — the recorded-error slot behind check.h. */
#include "check.h"

#include <signal.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stdio.h>

static _Thread_local char last_error[1024] = "no error";
static _Thread_local int last_oom; /* the last failure was out of device memory */

/* C11 atomics, not plain volatile: signal handlers write them and the
 * oracle's worker threads read them (lock-free atomics are also
 * async-signal-safe; a data race on a volatile int is not). */
_Atomic int vsa_interrupt_flag;
_Atomic int vsa_interrupt_raised;
_Atomic int vsa_timeout_flag;
_Static_assert(ATOMIC_INT_LOCK_FREE == 2, "signal handlers need lock-free atomic ints");

const char *
vsa_interrupt_message(void)
{
  switch (vsa_interrupt_flag) {
  case SIGINT: return "interrupted! (SIGINT)";
  case SIGTERM: return "interrupted! (SIGTERM)";
  case SIGHUP: return "interrupted! (SIGHUP)";
  case SIGPIPE: return "interrupted! (SIGPIPE: stdout closed)";
  case SIGUSR1: return "interrupted! (SIGUSR1)";
  default: return "interrupted!";
  }
}

int
vsa_poll_stop(void)
{
  if (vsa_interrupt_flag) {
    vsa_interrupt_raised = 1;
    return vsa_fail("%s", vsa_interrupt_message());
  }
  if (vsa_timeout_flag) {
    vsa_timeout_flag = 0;
    return vsa_fail("point timeout!");
  }
  return 0;
}

int
vsa_fail(const char *fmt, ...)
{
  last_oom = 0;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(last_error, sizeof last_error, fmt, ap);
  va_end(ap);
  return -1;
}

const char *
vsa_last_error(void)
{
  return last_error;
}

int
vsa_fail_cuda(cudaError_t e, const char *what, const char *file, int line)
{
  /* Clear a non-sticky error so the next call does not report it again. */
  (void)cudaGetLastError();
  vsa_fail("cuda: %s (%s) in %s at %s:%d", cudaGetErrorName(e),
           cudaGetErrorString(e), what, file, line);
  last_oom = e == cudaErrorMemoryAllocation;
  return -1;
}

int
vsa_last_error_is_oom(void)
{
  return last_oom;
}
