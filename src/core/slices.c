/* slices.c — independent slices of host work on threads (slices.h). */
#define _GNU_SOURCE /* sched_getaffinity, CPU_COUNT */
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <unistd.h>

#include "slices.h"

int
vsa_host_threads(void)
{
  /* VSALAB_HOST_THREADS: a decimal count; anything else reads as unset. */
  const char *env = getenv("VSALAB_HOST_THREADS");
  if (env && *env) {
    char *end;
    long n = strtol(env, &end, 10);
    if (*end == '\0' && n >= 1) return n > 64 ? 64 : (int)n;
  }
  /* The processors this process may run on (taskset, a Slurm or cgroup
   * CPU set), not every online one. */
  cpu_set_t set;
  long n = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set)
                                                       : sysconf(_SC_NPROCESSORS_ONLN);
  if (n < 1) n = 1;
  if (n > 64) n = 64;
  return (int)n;
}

typedef struct {
  int (*fn)(void *ctx, int slice, int *detail);
  void *ctx;
  int nslices;
  int next;   /* the next slice to take (atomic) */
  int lowest; /* the lowest failing slice so far (atomic; nslices: none):
               * slices above it are not taken, those below still run, so
               * the reported slice does not depend on timing */
  pthread_mutex_t mu;
  int err, err_slice, err_detail;
} slice_pool;

static void *
slice_worker(void *arg)
{
  slice_pool *p = arg;
  for (;;) {
    int s = __atomic_fetch_add(&p->next, 1, __ATOMIC_RELAXED);
    if (s >= p->nslices || s > __atomic_load_n(&p->lowest, __ATOMIC_RELAXED)) break;
    int detail = 0;
    int rc = p->fn(p->ctx, s, &detail);
    if (rc != 0) {
      pthread_mutex_lock(&p->mu);
      if (p->err == 0 || s < p->err_slice) {
        p->err = rc;
        p->err_slice = s;
        p->err_detail = detail;
        __atomic_store_n(&p->lowest, s, __ATOMIC_RELAXED);
      }
      pthread_mutex_unlock(&p->mu);
    }
  }
  return NULL;
}

int
vsa_run_slices(int nslices, int nthreads, int (*fn)(void *ctx, int slice, int *detail),
               void *ctx, int *err_slice, int *err_detail)
{
  if (nthreads < 1) nthreads = 1;
  if (nthreads > nslices) nthreads = nslices > 0 ? nslices : 1;
  if (nthreads > 64) nthreads = 64;
  slice_pool p = {fn, ctx, nslices, 0, nslices, PTHREAD_MUTEX_INITIALIZER, 0, -1, 0};
  pthread_t th[64];
  int started = 0;
  for (int t = 1; t < nthreads; t++) {
    if (pthread_create(&th[t], NULL, slice_worker, &p) != 0) break;
    started = t;
  }
  slice_worker(&p);
  for (int t = 1; t <= started; t++) pthread_join(th[t], NULL);
  pthread_mutex_destroy(&p.mu);
  *err_slice = p.err_slice;
  *err_detail = p.err_detail;
  return p.err;
}
