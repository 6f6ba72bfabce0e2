/* async_copy.cuh — building blocks every native backward (sm_90a, sm_100a)
 * uses, as inline PTX: the 128B-swizzled bf16 tile layout, shared-memory
 * addresses, mbarriers, TMA tensor loads and plain bulk copies, bulk
 * reduce-adds, the async-proxy fences, named barriers, register
 * reallocation and the spin helpers of ordered hand-offs. All of it is
 * sm_90 PTX that sm_100 keeps unchanged.
 *
 * Tile convention: a 64-row bf16 tile with 64-element (128 B) rows is one
 * 8 KB "region", 1024-byte aligned, row r at r*128 with its 16-byte chunk c
 * stored at chunk c ^ (r & 7) (the 128B swizzle, Swizzle<3,4,3>), exactly
 * what a TMA load with CU_TENSOR_MAP_SWIZZLE_128B writes. A 64x128 tile is
 * two regions (columns 0-63, 64-127) 8 KB apart.
 */
#pragma once
#include <cuda_bf16.h>
#include <stdint.h>

// ----------------------------------------------------------------------------
// programmatic dependent launch (sm_90+; no-ops when compiled for older
// targets, and on a grid not launched as a programmatic dependent)

/* Let the next grid in the stream, launched as a programmatic dependent,
 * start now. */
__device__ __forceinline__ void
pdl_launch_dependents()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

/* Wait until the grid this one depends on has completed, its memory
 * visible. */
__device__ __forceinline__ void
pdl_wait()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// ----------------------------------------------------------------------------
// shared memory layout

/* Byte offset of element (row, col) of a swizzled 64-column bf16 region. */
__device__ __forceinline__ uint32_t
sw128_offset(int row, int col)
{
  return row * 128 + ((((col >> 3) ^ (row & 7)) << 4) | ((col & 7) << 1));
}

__device__ __forceinline__ uint32_t
smem_addr(const void *p)
{
  return (uint32_t)__cvta_generic_to_shared(p);
}

/* Writes by ordinary stores (st.shared, cp.async) made visible to the
 * async proxy (wgmma, tcgen05.mma, TMA and bulk copies). */
__device__ __forceinline__ void
fence_proxy_async()
{
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

// ----------------------------------------------------------------------------
// bulk reduce-add (TMA engine, no tensor map): global[0:bytes] += smem[0:bytes]

__device__ __forceinline__ void
bulk_reduce_add_f32(float *gdst, uint32_t ssrc, uint32_t bytes)
{
  asm volatile(
      "cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;\n"
      ::"l"(gdst), "r"(ssrc), "r"(bytes) : "memory");
  asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
}

/* The same for 32-bit integers (two's-complement wrap-around: exact, and
 * the same bits in any order). */
__device__ __forceinline__ void
bulk_reduce_add_u32(uint32_t *gdst, uint32_t ssrc, uint32_t bytes)
{
  asm volatile(
      "cp.reduce.async.bulk.global.shared::cta.bulk_group.add.u32 [%0], [%1], %2;\n"
      ::"l"(gdst), "r"(ssrc), "r"(bytes) : "memory");
  asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
}

/* Wait until the bulk ops of this thread have read their shared memory. */
__device__ __forceinline__ void
bulk_wait_read()
{
  asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory");
}

/* Wait until the bulk ops of this thread have completed. */
__device__ __forceinline__ void
bulk_wait_all()
{
  asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory");
}

// ----------------------------------------------------------------------------
// mbarriers (shared::cta), TMA loads, named barriers, register reallocation

__device__ __forceinline__ void
mbar_init(uint32_t bar, uint32_t count)
{
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}

/* Barrier initialisation made visible to the async proxy (TMA). */
__device__ __forceinline__ void
fence_mbar_init()
{
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}

__device__ __forceinline__ void
mbar_arrive(uint32_t bar)
{
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}

/* Arrive and announce `bytes` of TMA transactions for this phase. */
__device__ __forceinline__ void
mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes)
{
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes)
               : "memory");
}

/* Wait until the phase with this parity has completed. */
__device__ __forceinline__ void
mbar_wait(uint32_t bar, uint32_t parity)
{
  uint32_t done;
  do {
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        "selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done) : "r"(bar), "r"(parity) : "memory");
  } while (!done);
}

/* TMA: box (c0, r0) of a 2D tensor map into shared memory, completing on bar. */
__device__ __forceinline__ void
tma_load_2d(uint32_t dst, const void *tmap, int c0, int r0, uint32_t bar)
{
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3}], [%4];\n"
      ::"r"(dst), "l"(tmap), "r"(c0), "r"(r0), "r"(bar) : "memory");
}

/* TMA: box (c0, c1, c2) of a 3D tensor map into shared memory, completing
 * on bar (vsa_bwd::tile_map's maps: c0 the column, c1 the head in BSHD
 * (0 in BHSD), c2 the row). */
__device__ __forceinline__ void
tma_load_3d(uint32_t dst, const void *tmap, int c0, int c1, int c2, uint32_t bar)
{
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3, %4}], [%5];\n"
      ::"r"(dst), "l"(tmap), "r"(c0), "r"(c1), "r"(c2), "r"(bar) : "memory");
}

/* Plain bulk copy global -> shared (16-byte aligned, multiple of 16 bytes). */
__device__ __forceinline__ void
bulk_load(uint32_t dst, const void *src, uint32_t bytes, uint32_t bar)
{
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n"
      ::"r"(dst), "l"(src), "r"(bytes), "r"(bar) : "memory");
}

/* bar.sync on a named barrier for `count` threads (id 0 is __syncthreads). */
__device__ __forceinline__ void
named_sync(int id, int count)
{
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(count) : "memory");
}

/* The same without .aligned: the threads of a warp may arrive apart (after
 * per-lane spin waits on mbarriers or flags), which bar.sync forbids. */
__device__ __forceinline__ void
named_sync_any(int id, int count)
{
  asm volatile("barrier.sync %0, %1;\n" ::"r"(id), "r"(count) : "memory");
}

/* barrier.arrive: count this warp's threads in on named barrier `id` of
 * `count` and go on (the other side waits with named_sync_any). */
__device__ __forceinline__ void
named_arrive_any(int id, int count)
{
  asm volatile("barrier.arrive %0, %1;\n" ::"r"(id), "r"(count) : "memory");
}

template <int N>
__device__ __forceinline__ void
setmaxnreg_inc()
{
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
}

template <int N>
__device__ __forceinline__ void
setmaxnreg_dec()
{
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
}

/* Order generic-proxy accesses to global memory against async-proxy (bulk
 * copy) ones. */
__device__ __forceinline__ void
fence_proxy_async_global()
{
  asm volatile("fence.proxy.async.global;\n" ::: "memory");
}

__device__ __forceinline__ int
ld_acquire(const int *p)
{
  int v;
  asm volatile("ld.acquire.gpu.global.b32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
  return v;
}

/* Spin until *p == v (acquire). Each caller's turn comes once every lower
 * turn has been handed on; a wait past ~2^28 polls means it never will (a
 * broken order), and traps rather than hanging the GPU. */
__device__ __forceinline__ void
wait_turn(const int *p, int v)
{
  for (long long spin = 0; ld_acquire(p) != v; spin++)
    if (spin > (1ll << 28)) __trap();
}

__device__ __forceinline__ void
red_release_add(int *p, int v)
{
  asm volatile("red.release.gpu.global.add.s32 [%0], %1;\n" ::"l"(p), "r"(v) : "memory");
}

/* 2^x in one MUFU op, denormal results flushed to 0 (P = 2^(s - lse) <= 1:
 * a flushed denormal changes nothing at bf16 precision). */
__device__ __forceinline__ float
fast_exp2(float x)
{
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

/* 2^e exactly, for e in [-126, 127] (the fixed-point row scales). */
__device__ __forceinline__ float
exp2_int(int e)
{
  return __int_as_float((e + 127) << 23);
}

__device__ __forceinline__ uint32_t
pack_bf16(float lo, float hi)
{
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t *>(&v);
}
