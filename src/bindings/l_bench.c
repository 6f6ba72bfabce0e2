/* l_bench.c — timing and device queries for Lua: vsalab.bench_raw,
 * vsalab.device_info, vsalab.synchronize.
 *
 * bench_raw calls fn warmup times, then takes samples with a CUDA event pair
 * around each call (clock='cuda', the default when a device is usable) or
 * the host monotonic clock, synchronizing after each, until a fixed count or
 * nvbench's stopping rule (noise target, minimum samples and time, time cap)
 * is met; the loop is in C, never a Lua loop around launches.
 * lua/vsalab/bench.lua turns the samples into statistics.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "device.h"
#include "kernels.h"
#include "l_args.h"
#include "l_memory.h"
#include "l_tensor.h"
#include "lua_api.h"
#include "nvml.h"

static double
host_ms(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

static int
opt_count(lua_State *L, int idx, const char *k, int def, int lo, int hi)
{
  lua_getfield(L, idx, k);
  int v = def;
  if (!lua_isnil(L, -1)) {
    lua_Number n = lua_tonumber(L, -1);
    if (lua_type(L, -1) != LUA_TNUMBER || n != floor(n) || n < lo || n > hi)
      vsa_lua_errorf(L, "bench: field '%s' must be an integer in [%d, %d]", k, lo, hi);
    v = (int)n;
  }
  lua_pop(L, 1);
  return v;
}

/* Call the function at index 1 once; errors propagate (events are freed by
 * the caller's cleanup closure below). */
static void
call_fn(lua_State *L)
{
  lua_pushvalue(L, 1);
  lua_call(L, 0, 0);
}

/* Calls in flight in mode 'sustained' (each with its own event pair). */
#define SUSTAIN_RING 32

typedef struct {
  cudaEvent_t start, stop;
  cudaEvent_t ring_start[SUSTAIN_RING], ring_stop[SUSTAIN_RING]; /* mode 'sustained' */
  int *hold;             /* pinned, mapped: [0] release, [1] hold timed out */
  cudaStream_t capture;  /* mode 'graph': the stream the call is captured on */
  cudaGraphExec_t graph; /* ... and the instantiated graph replayed per sample */
  double fn_host_ms;     /* host time of the last sample's call of fn */
} event_pair;

static int
l_events_gc(lua_State *L)
{
  event_pair *e = lua_touserdata(L, 1);
  if (e->start) cudaEventDestroy(e->start);
  if (e->stop) cudaEventDestroy(e->stop);
  for (int i = 0; i < SUSTAIN_RING; i++) {
    if (e->ring_start[i]) cudaEventDestroy(e->ring_start[i]);
    if (e->ring_stop[i]) cudaEventDestroy(e->ring_stop[i]);
    e->ring_start[i] = e->ring_stop[i] = NULL;
  }
  if (e->graph) cudaGraphExecDestroy(e->graph);
  if (e->capture) cudaStreamDestroy(e->capture);
  if (e->hold) { /* a held kernel still polling must see its release first */
    e->hold[0] = 1;
    cudaDeviceSynchronize();
    cudaFreeHost(e->hold);
  }
  e->hold = NULL;
  e->start = e->stop = NULL;
  e->graph = NULL;
  e->capture = NULL;
  (void)cudaGetLastError();
  return 0;
}

/* Relative standard deviation of n samples (0 for n < 2). */
static double
rel_stddev(const double *x, int n)
{
  if (n < 2) return 0;
  double mean = 0, var = 0;
  for (int i = 0; i < n; i++) mean += x[i];
  mean /= n;
  for (int i = 0; i < n; i++) var += (x[i] - mean) * (x[i] - mean);
  var /= (n - 1);
  return mean > 0 ? sqrt(var) / mean : 0;
}

/* One L2-sized buffer per process, rewritten before each cold sample. */
static void *l2_buffer;
static size_t l2_bytes;

static int
flush_l2(lua_State *L)
{
  if (!l2_buffer) {
    int dev = vsa_lua_current_device(), bytes = 0;
    cudaError_t e = cudaDeviceGetAttribute(&bytes, cudaDevAttrL2CacheSize, dev);
    if (e == cudaSuccess) {
      l2_bytes = 2 * (size_t)(bytes > 0 ? bytes : 64 << 20);
      e = cudaMalloc(&l2_buffer, l2_bytes);
    }
    if (e != cudaSuccess) {
      vsa_fail_cuda(e, "L2 flush buffer", __FILE__, __LINE__);
      return vsa_lua_raise(L);
    }
  }
  static unsigned char byte;
  cudaError_t e = cudaMemsetAsync(l2_buffer, byte++, l2_bytes, vsa_stream());
  if (e != cudaSuccess) {
    vsa_fail_cuda(e, "L2 flush", __FILE__, __LINE__);
    return vsa_lua_raise(L);
  }
  return 0;
}

/* Mode 'graph': capture one call of fn into a CUDA graph on a fresh stream
 * (every launch of the bindings goes to vsa_stream()) and instantiate it in
 * ev->graph. The capture is thread-local, so an allocation, a host copy or a
 * synchronisation inside fn fails the capture with a clear error instead of
 * baking freed or host-dependent work into the graph. */
static void
capture_graph(lua_State *L, event_pair *ev)
{
  cudaError_t e = cudaStreamCreateWithFlags(&ev->capture, cudaStreamNonBlocking);
  if (e == cudaSuccess) e = cudaStreamBeginCapture(ev->capture, cudaStreamCaptureModeThreadLocal);
  if (e != cudaSuccess) {
    vsa_fail_cuda(e, "bench: graph capture", __FILE__, __LINE__);
    vsa_lua_raise(L);
  }
  vsa_set_stream(ev->capture);
  lua_gc(L, LUA_GCSTOP, 0); /* no cudaFree from a collector mid-capture */
  vsa_gc_stopped = 1;
  lua_pushvalue(L, 1);
  int rc = lua_pcall(L, 0, 0, 0);
  vsa_gc_stopped = 0;
  lua_gc(L, LUA_GCRESTART, 0);
  vsa_set_stream(0);
  cudaGraph_t g = NULL;
  e = cudaStreamEndCapture(ev->capture, &g);
  if (rc == 0 && e == cudaSuccess) e = cudaGraphInstantiate(&ev->graph, g, 0);
  if (g) cudaGraphDestroy(g);
  (void)cudaGetLastError(); /* capture errors are not sticky */
  if (rc != 0)
    vsa_lua_errorf(L, "bench: mode 'graph' could not capture the timed function (it must "
                      "only launch work into buffers that already exist): %s",
                   lua_tostring(L, -1));
  if (e != cudaSuccess)
    vsa_lua_errorf(L, "bench: mode 'graph' could not capture the timed function: %s",
                   cudaGetErrorString(e));
}

/* Seconds a held stream waits for its release before the sample is void. */
#define HOLD_TIMEOUT_S 10.0

/* A held sample that the hold kernel gave up on (HOLD_TIMEOUT_S without
 * its release): its time is void. */
#define VOID_SAMPLE (-1.0)

/* One CUDA sample: [flush L2] [hold] start, fn or graph replay, stop;
 * release; wait. With hold, every launch is queued before the start event
 * fires, so the sample is the GPU's time alone. fn runs protected so the
 * stream is released before its error propagates. Returns milliseconds,
 * or VOID_SAMPLE (ev->fn_host_ms says how long fn held the host). */
static double
cuda_sample(lua_State *L, event_pair *ev, int cold, int graph)
{
  cudaStream_t s = vsa_stream();
  cudaError_t e = cudaSuccess;
  if (cold) flush_l2(L);
  if (ev->hold) {
    __atomic_store_n(&ev->hold[0], 0, __ATOMIC_RELEASE);
    ev->hold[1] = 0;
    e = vsa_hold_stream(ev->hold, HOLD_TIMEOUT_S, s);
  }
  if (e == cudaSuccess) e = cudaEventRecord(ev->start, s);
  int rc = 0;
  if (e == cudaSuccess) {
    if (graph) {
      e = cudaGraphLaunch(ev->graph, s);
    } else {
      /* A collected tensor's cudaFree would wait for the held stream: no
       * collection while it is held, a step once it is released. */
      if (ev->hold) lua_gc(L, LUA_GCSTOP, 0);
      vsa_gc_stopped = ev->hold != NULL;
      lua_pushvalue(L, 1);
      const double h0 = host_ms();
      rc = lua_pcall(L, 0, 0, 0);
      ev->fn_host_ms = host_ms() - h0;
      vsa_gc_stopped = 0;
      if (ev->hold) lua_gc(L, LUA_GCRESTART, 0);
    }
  }
  if (e == cudaSuccess && rc == 0) e = cudaEventRecord(ev->stop, s);
  if (ev->hold) __atomic_store_n(&ev->hold[0], 1, __ATOMIC_RELEASE);
  if (rc != 0) lua_error(L);
  if (e == cudaSuccess) e = cudaEventSynchronize(ev->stop);
  if (ev->hold) lua_gc(L, LUA_GCSTEP, 0);
  float f = 0;
  if (e == cudaSuccess) e = cudaEventElapsedTime(&f, ev->start, ev->stop);
  if (e != cudaSuccess) {
    vsa_fail_cuda(e, graph ? "bench: graph replay" : "bench sample", __FILE__, __LINE__);
    vsa_lua_raise(L);
  }
  if (ev->hold && __atomic_load_n(&ev->hold[1], __ATOMIC_ACQUIRE)) return VOID_SAMPLE;
  return f;
}

/* Mode 'sustained' on the CUDA clock: calls queued back to back, an event
 * pair around each and no synchronisation between them, so the host queues
 * the next calls while the GPU runs this one, as a training loop does; the
 * host waits only with SUSTAIN_RING calls in flight. Queues until `count`
 * calls (count > 0) or, otherwise, until max_time_ms of wall time with at
 * least min_samples, at most max_samples; every call is a sample (x[],
 * in order). Returns the number of samples. */
static int
sustained_samples(lua_State *L, event_pair *ev, double *x, int count, int min_samples,
                  int max_samples, double max_time_ms)
{
  cudaStream_t s = vsa_stream();
  cudaError_t e = cudaSuccess;
  for (int i = 0; i < SUSTAIN_RING && e == cudaSuccess; i++) {
    e = cudaEventCreate(&ev->ring_start[i]);
    if (e == cudaSuccess) e = cudaEventCreate(&ev->ring_stop[i]);
  }
  int queued = 0, n = 0;
  const double wall0 = host_ms();
  while (e == cudaSuccess) {
    int more = count > 0 ? queued < count
                         : queued < max_samples &&
                               !(queued >= min_samples && host_ms() - wall0 >= max_time_ms);
    if (!more && n == queued) break;
    if (!more || queued - n == SUSTAIN_RING) { /* take the oldest call's time */
      const int k = n % SUSTAIN_RING;
      float f = 0;
      e = cudaEventSynchronize(ev->ring_stop[k]);
      if (e == cudaSuccess) e = cudaEventElapsedTime(&f, ev->ring_start[k], ev->ring_stop[k]);
      x[n++] = f;
      continue;
    }
    const int k = queued % SUSTAIN_RING;
    e = cudaEventRecord(ev->ring_start[k], s);
    if (e != cudaSuccess) break;
    lua_pushvalue(L, 1);
    if (lua_pcall(L, 0, 0, 0) != 0) lua_error(L);
    e = cudaEventRecord(ev->ring_stop[k], s);
    queued++;
  }
  if (e != cudaSuccess) {
    vsa_fail_cuda(e, "bench: sustained sample", __FILE__, __LINE__);
    vsa_lua_raise(L);
  }
  return n;
}

static double
opt_real(lua_State *L, int idx, const char *k, double def, double lo, double hi)
{
  lua_getfield(L, idx, k);
  double v = def;
  if (!lua_isnil(L, -1)) {
    if (lua_type(L, -1) != LUA_TNUMBER || !(lua_tonumber(L, -1) >= lo && lua_tonumber(L, -1) <= hi))
      vsa_lua_errorf(L, "bench: field '%s' must be a number in [%g, %g]", k, lo, hi);
    v = lua_tonumber(L, -1);
  }
  lua_pop(L, 1);
  return v;
}

/* vsalab.bench_raw(fn, opts) -> {ms...}, clock, stop reason.
 * opts: mode='hot' (back-to-back), 'cold' (an L2-sized buffer rewritten
 * before every sample, outside the timed region), 'graph' (fn captured
 * once into a CUDA graph after the warm-up; each sample replays it, so host
 * overhead between launches is gone) or 'sustained' (cuda clock: calls
 * queued back to back without synchronising, sustained_samples; host
 * clock: as 'hot'); warmup=3; repeats=N (a
 * fixed count) or the adaptive rule with nvbench's defaults: at least
 * min_samples=10 samples and min_time=0.5 s of samples, then stop once the
 * relative standard deviation is <= max_noise=0.005, or at max_time=15 s,
 * or at max_samples=100000; clock='cuda'|'host'; hold=true (cuda clock:
 * a kernel holds the stream while each sample's launches are queued, so
 * launch gaps stay out of the sample, as nvbench's blocking kernel does;
 * a call that waits on the GPU meanwhile voids the sample with an error
 * after 10 s; hold=false times from the first launch instead). */
static int
l_bench_raw(lua_State *L)
{
  luaL_checktype(L, 1, LUA_TFUNCTION);
  if (lua_isnoneornil(L, 2)) lua_newtable(L);
  luaL_checktype(L, 2, LUA_TTABLE);
  lua_settop(L, 2);
  static const char *const keys[] = {"warmup", "repeats", "clock", "keep_samples", "hold",
    "mode", "min_samples", "max_samples", "max_noise", "min_time", "max_time", NULL};
  lua_pushnil(L);
  while (lua_next(L, 2) != 0) {
    lua_pop(L, 1);
    const char *k = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : "?";
    int ok = 0;
    for (int i = 0; keys[i]; i++) ok |= strcmp(k, keys[i]) == 0;
    if (!ok)
      return vsa_lua_errorf(L, "bench: unknown option '%s' (takes warmup, repeats, clock, "
                               "keep_samples, hold, mode, min_samples, max_samples, max_noise, "
                               "min_time, max_time)", k);
  }
  int warmup = opt_count(L, 2, "warmup", 3, 0, 1000000);
  lua_getfield(L, 2, "repeats");
  int fixed = !lua_isnil(L, -1);
  lua_pop(L, 1);
  int repeats = opt_count(L, 2, "repeats", 0, 1, 1000000);
  int min_samples = opt_count(L, 2, "min_samples", 10, 1, 1000000);
  int max_samples = opt_count(L, 2, "max_samples", 100000, 1, 10000000);
  double max_noise = opt_real(L, 2, "max_noise", 0.005, 0, 1e9);
  double min_time_ms = 1e3 * opt_real(L, 2, "min_time", 0.5, 0, 1e6);
  double max_time_ms = 1e3 * opt_real(L, 2, "max_time", 15, 0, 1e6);
  if (!fixed && max_samples < min_samples)
    return vsa_lua_errorf(L, "bench: max_samples (%d) is below min_samples (%d)", max_samples,
                          min_samples);
  if (!fixed && min_time_ms > max_time_ms)
    return vsa_lua_errorf(L, "bench: min_time (%g s) is above max_time (%g s)", min_time_ms / 1e3,
                          max_time_ms / 1e3);
  lua_getfield(L, 2, "mode");
  const char *mode = lua_isnil(L, -1) ? "hot" : lua_tostring(L, -1);
  if (!mode || (strcmp(mode, "hot") && strcmp(mode, "cold") && strcmp(mode, "graph") &&
                strcmp(mode, "sustained")))
    return vsa_lua_errorf(L, "bench: field 'mode' must be 'hot', 'cold', 'graph' or 'sustained'");
  int cold = strcmp(mode, "cold") == 0, graph = strcmp(mode, "graph") == 0;
  int sustained = strcmp(mode, "sustained") == 0;
  lua_pop(L, 1);
  lua_getfield(L, 2, "clock");
  const char *clock = lua_isnil(L, -1) ? NULL : lua_tostring(L, -1);
  int use_cuda;
  if (!clock) {
    int n;
    use_cuda = vsa_device_count(&n) == 0;
  } else if (strcmp(clock, "cuda") == 0) {
    vsa_lua_require_cuda(L);
    use_cuda = 1;
  } else if (strcmp(clock, "host") == 0) {
    use_cuda = 0;
  } else {
    return vsa_lua_errorf(L, "bench: field 'clock' must be 'cuda' or 'host'");
  }
  lua_pop(L, 1);
  if (cold && !use_cuda)
    return vsa_lua_errorf(L, "bench: mode 'cold' needs the cuda clock (it flushes the GPU's L2)");
  if (graph && !use_cuda)
    return vsa_lua_errorf(L, "bench: mode 'graph' needs the cuda clock (it replays a CUDA graph)");
  /* Events and the sample array live in userdata, so an error in fn leaks
   * nothing. */
  event_pair *ev = lua_newuserdata(L, sizeof *ev);
  memset(ev, 0, sizeof *ev);
  lua_newtable(L);
  lua_pushcfunction(L, l_events_gc);
  lua_setfield(L, -2, "__gc");
  lua_setmetatable(L, -2);
  int cap = fixed ? repeats : max_samples;
  double *x = lua_newuserdata(L, sizeof(double) * (size_t)cap);
  int hold = vsa_arg_bool(L, 2, "bench", "hold", 1);
  (void)vsa_arg_bool(L, 2, "bench", "keep_samples", 0); /* validated here, used by bench.lua */
  if (use_cuda) {
    vsa_lua_require_cuda(L);
    cudaError_t e = cudaEventCreate(&ev->start);
    if (e == cudaSuccess) e = cudaEventCreate(&ev->stop);
    if (e == cudaSuccess && hold && !sustained) /* sustained never holds the stream */
      e = cudaHostAlloc((void **)&ev->hold, 2 * sizeof(int), cudaHostAllocMapped);
    if (e != cudaSuccess) {
      vsa_fail_cuda(e, "cudaEventCreate", __FILE__, __LINE__);
      return vsa_lua_raise(L);
    }
  }
  for (int i = 0; i < warmup; i++) call_fn(L);
  if (use_cuda) {
    cudaError_t e = cudaDeviceSynchronize();
    if (e != cudaSuccess) {
      vsa_fail_cuda(e, "bench warm-up", __FILE__, __LINE__);
      return vsa_lua_raise(L);
    }
  }
  if (graph) capture_graph(L, ev);
  const char *reason = "repeats";
  double total = 0, wall0 = host_ms();
  int n = 0, voids = 0;
  const int queued_ahead = sustained && use_cuda; /* else one synchronised sample at a time */
  if (queued_ahead) {
    n = sustained_samples(L, ev, x, fixed ? repeats : 0, min_samples, max_samples, max_time_ms);
    reason = fixed ? "repeats" : n >= max_samples ? "max_samples" : "max_time";
  }
  for (; !queued_ahead;) {
    if (fixed && n >= repeats) break;
    if (!fixed) {
      double wall = host_ms() - wall0;
      if (n >= min_samples && total >= min_time_ms && rel_stddev(x, n) <= max_noise) {
        reason = "noise";
        break;
      }
      if (n >= min_samples && wall >= max_time_ms) {
        reason = "max_time";
        break;
      }
      if (n >= max_samples) {
        reason = "max_samples";
        break;
      }
    }
    double ms;
    if (use_cuda) {
      ms = cuda_sample(L, ev, cold, graph);
      if (ms == VOID_SAMPLE) {
        /* A function that synchronises voids every sample: the second void
         * one is an error. A single void sample has been seen now and then
         * on the H200 in runs whose timed function never synchronises
         * (kernels/NOTES.md, v3.6): dropped with a warning that says
         * how long the call held the host, not the end of the run. */
        if (++voids > 1)
          vsa_lua_errorf(L, "bench: the timed function waited on the GPU while the stream was "
                            "held for %g s (it synchronises, copies to the host or queues too "
                            "much work; its call took %.3f s on the host); time it with "
                            "hold=false", HOLD_TIMEOUT_S, ev->fn_host_ms / 1e3);
        fprintf(stderr, "bench: warning: a held sample waited %g s for its release (the timed "
                        "call took %.3f s on the host); sample dropped, sampling goes on\n",
                HOLD_TIMEOUT_S, ev->fn_host_ms / 1e3);
        continue;
      }
    } else {
      double t0 = host_ms();
      call_fn(L);
      ms = host_ms() - t0;
    }
    x[n++] = ms;
    total += ms;
  }
  lua_createtable(L, n, 0);
  for (int i = 0; i < n; i++) {
    lua_pushnumber(L, x[i]);
    lua_rawseti(L, -2, i + 1);
  }
  lua_pushstring(L, use_cuda ? "cuda" : "host");
  lua_pushstring(L, reason);
  return 3;
}

/* vsalab.synchronize(): wait for the device; raises a pending CUDA error. */
static int
l_synchronize(lua_State *L)
{
  vsa_lua_require_cuda(L);
  cudaError_t e = cudaDeviceSynchronize();
  if (e == cudaSuccess) e = cudaGetLastError();
  if (e != cudaSuccess) {
    vsa_fail_cuda(e, "synchronize", __FILE__, __LINE__);
    return vsa_lua_raise(L);
  }
  return 0;
}

static void
set_str(lua_State *L, const char *k, const char *v)
{
  lua_pushstring(L, v);
  lua_setfield(L, -2, k);
}

static void
set_num(lua_State *L, const char *k, double v)
{
  lua_pushnumber(L, v);
  lua_setfield(L, -2, k);
}

/* vsalab.device_info([n]) -> {name, cc, sm_count, driver, runtime,
 * sm_clock_mhz, mem_clock_mhz, memory_gib, free_gib, l2_mib, smem_optin_kib,
 * index, uuid}. free_gib (cudaMemGetInfo: what every process leaves free
 * now) only for the current device. */
static int
l_device_info(lua_State *L)
{
  vsa_lua_require_cuda(L);
  int dev = (int)luaL_optinteger(L, 1, vsa_lua_current_device());
  vsa_device_info d;
  if (vsa_device_get_info(dev, &d) != 0) return vsa_lua_raise(L);
  char buf[64];
  lua_newtable(L);
  set_num(L, "index", d.index);
  set_str(L, "name", d.name);
  set_str(L, "uuid", d.uuid);
  snprintf(buf, sizeof buf, "%d.%d", d.cc_major, d.cc_minor);
  set_str(L, "cc", buf);
  set_num(L, "cc_major", d.cc_major);
  set_num(L, "cc_minor", d.cc_minor);
  set_num(L, "sm_count", d.sm_count);
  snprintf(buf, sizeof buf, "%d.%d", d.driver_version / 1000, (d.driver_version % 1000) / 10);
  set_str(L, "driver", buf);
  snprintf(buf, sizeof buf, "%d.%d", d.runtime_version / 1000, (d.runtime_version % 1000) / 10);
  set_str(L, "runtime", buf);
  set_num(L, "sm_clock_mhz", d.sm_clock_khz / 1000.0);
  set_num(L, "mem_clock_mhz", d.mem_clock_khz / 1000.0);
  set_num(L, "memory_gib", d.total_mem_bytes / 1073741824.0);
  size_t free_b = 0, total_b = 0;
  if (dev == vsa_lua_current_device() && cudaMemGetInfo(&free_b, &total_b) == cudaSuccess)
    set_num(L, "free_gib", free_b / 1073741824.0);
  else
    (void)cudaGetLastError();
  set_num(L, "l2_mib", d.l2_bytes / 1048576.0);
  set_num(L, "smem_optin_kib", d.smem_per_block_optin / 1024.0);
  return 1;
}

/* vsalab.gpu_clocks([n]) -> {sm_mhz, reasons, throttled, power_capped_ms,
 * thermal_capped_ms, energy_j, time_s} or nil, why: the current SM clock,
 * NVML's clock-event reasons (throttled = a power, thermal or hardware
 * slowdown is active now), NVML's cumulative counters (power_capped_ms and
 * thermal_capped_ms: time held below the application clocks by that limit;
 * energy_j: the board's energy, which NVML updates coarsely: compare
 * readings seconds apart; each absent where NVML or the GPU lacks it) and
 * the host's monotonic time when read (seconds). Subtract two readings for
 * what happened between them. NVML is optional. */
static int
l_gpu_clocks(lua_State *L)
{
  int n;
  if (vsa_device_count(&n) != 0) {
    lua_pushnil(L);
    lua_pushstring(L, vsa_last_error());
    return 2;
  }
  int dev = (int)luaL_optinteger(L, 1, vsa_lua_current_device());
  vsa_gpu_clocks c;
  if (dev < 0 || dev >= n) {
    lua_pushnil(L);
    lua_pushfstring(L, "no device %d (this process sees %d)", dev, n);
    return 2;
  }
  if (vsa_nvml_clocks(dev, &c) != 0) {
    lua_pushnil(L);
    lua_pushstring(L, vsa_last_error());
    return 2;
  }
  lua_newtable(L);
  set_num(L, "sm_mhz", c.sm_mhz);
  set_num(L, "reasons", (double)c.reasons);
  lua_pushboolean(L, c.throttled);
  lua_setfield(L, -2, "throttled");
  if (c.power_capped_ns >= 0) set_num(L, "power_capped_ms", c.power_capped_ns / 1e6);
  if (c.thermal_capped_ns >= 0) set_num(L, "thermal_capped_ms", c.thermal_capped_ns / 1e6);
  if (c.energy_mj >= 0) set_num(L, "energy_j", c.energy_mj / 1e3);
  set_num(L, "time_s", host_ms() / 1e3);
  return 1;
}

/* vsalab.gpu_sleep(microseconds): enqueue a kernel that spins that long
 * (VSALAB_SLOWDOWN_US uses it to make a deliberately slower variant). */
static int
l_gpu_sleep(lua_State *L)
{
  double us = luaL_checknumber(L, 1);
  if (!(us >= 0 && us <= 1e7)) return vsa_lua_errorf(L, "gpu_sleep: microseconds must be in [0, 1e7]");
  vsa_lua_require_cuda(L);
  cudaError_t e = vsa_gpu_sleep((long long)(us * 1000), vsa_stream());
  if (e != cudaSuccess) {
    vsa_fail_cuda(e, "gpu_sleep", __FILE__, __LINE__);
    return vsa_lua_raise(L);
  }
  return 0;
}

/* vsalab.gpu_fault(): launch a kernel that stores to an unmapped address
 * and wait for it: raises cudaErrorIllegalAddress, and the CUDA context is
 * unusable afterwards (a sticky error; only a new process recovers).
 * Fault injection for the robustness proof (VSALAB_FAULT_AT in experiments,
 * tests/gpu/check_fault_recovery.sh); never called otherwise. */
static int
l_gpu_fault(lua_State *L)
{
  vsa_lua_require_cuda(L);
  cudaError_t e = vsa_gpu_fault(vsa_stream());
  if (e == cudaSuccess) e = cudaDeviceSynchronize();
  if (e != cudaSuccess) {
    vsa_fail_cuda(e, "gpu_fault", __FILE__, __LINE__);
    return vsa_lua_raise(L);
  }
  return 0;
}

/* vsalab.runtime_version() -> "13.0" (no GPU needed) */
static int
l_runtime_version(lua_State *L)
{
  char buf[32];
  vsa_runtime_version_string(buf, sizeof buf);
  lua_pushstring(L, buf);
  return 1;
}

static const luaL_Reg functions[] = {
    {"bench_raw", l_bench_raw}, {"synchronize", l_synchronize},
    {"device_info", l_device_info}, {"runtime_version", l_runtime_version},
    {"gpu_clocks", l_gpu_clocks}, {"gpu_sleep", l_gpu_sleep}, {"gpu_fault", l_gpu_fault},
    {NULL, NULL}};

void
vsa_lua_open_bench(lua_State *L)
{
  luaL_register(L, NULL, functions);
}
