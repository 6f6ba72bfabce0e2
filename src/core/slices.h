/* slices.h — independent slices of host work on threads.
 *
 * A caller splits a loop into slices that write disjoint outputs, each
 * computed alone in a fixed order, so results never depend on the thread
 * count or on which thread ran a slice. Threads take slices in turn from a
 * shared counter (slices of uneven cost balance). A failure stops the
 * threads from taking slices above it, while those below still run, so the
 * lowest failing slice is the one reported, whatever the timing.
 * Error messages are the caller's to record, on its own thread: check.h's
 * error slot is thread-local.
 */
#pragma once

/* The default thread count, at most 64: VSALAB_HOST_THREADS when it is a
 * decimal count >= 1 (tests use it to show a result does not depend on
 * it; any other value reads as unset), else the processors this process
 * may run on (its CPU affinity: taskset, Slurm, cgroups). */
int vsa_host_threads(void);

/* Run fn(ctx, s, &detail) for s = 0..nslices-1 on up to nthreads threads
 * (the caller's thread included; a thread that cannot start leaves its
 * slices to the others). fn returns 0 on success, else a code of the
 * caller's. Returns 0 or the code of the lowest failing slice, with that
 * slice in *err_slice and its detail in *err_detail (-1 and 0 on success). */
int vsa_run_slices(int nslices, int nthreads, int (*fn)(void *ctx, int slice, int *detail),
                   void *ctx, int *err_slice, int *err_detail);
