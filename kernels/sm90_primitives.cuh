/* sm90_primitives.cuh — the Hopper (sm_90a) building blocks the native
 * backward uses, as inline PTX (CCCL's cuda::ptx has no wgmma wrappers):
 * shared-memory matrix descriptors for 128-byte-swizzled bf16 tiles, wgmma
 * issue/commit/wait, cp.async, and the async-proxy fence.
 *
 * Tile convention: a 64-row bf16 tile with 64-element (128 B) rows is one
 * 8 KB "region", 1024-byte aligned, row r at r*128 with its 16-byte chunk c
 * stored at chunk c ^ (r & 7) (the 128B swizzle, Swizzle<3,4,3>). A 64x128
 * tile is two regions (columns 0-63, 64-127) 8 KB apart. Descriptor fields
 * follow the PTX ISA's "matrix descriptor" and canonical-layout tables:
 *   K-major:  SBO = 1024 (next 8 rows), LBO unused; a k16 step = +32 B.
 *   MN-major: SBO = 1024 (next 8 K-rows), LBO = 8192 (next 64 MN columns);
 *             a k16 step = +2048 B (16 K-rows).
 */
#pragma once
#include <stdint.h>

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

/* wgmma descriptor of a 128B-swizzled operand starting at shared address
 * `addr` (bits: start>>4 @0, LBO>>4 @16, SBO>>4 @32, swizzle 128B = 1 @62). */
__device__ __forceinline__ uint64_t
make_desc(uint32_t addr, uint32_t lbo, uint32_t sbo)
{
  return (uint64_t)((addr & 0x3FFFF) >> 4) | ((uint64_t)(lbo >> 4) << 16) |
         ((uint64_t)(sbo >> 4) << 32) | (1ull << 62);
}

__device__ __forceinline__ uint64_t
desc_kmajor(uint32_t addr)
{
  return make_desc(addr, 16, 1024);
}

__device__ __forceinline__ uint64_t
desc_mnmajor(uint32_t addr)
{
  return make_desc(addr, 8192, 1024);
}

// ----------------------------------------------------------------------------
// wgmma control

__device__ __forceinline__ void
wgmma_fence()
{
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}

__device__ __forceinline__ void
wgmma_commit()
{
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}

template <int N>
__device__ __forceinline__ void
wgmma_wait()
{
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}

/* Keep the compiler from moving accumulator reads/writes across a wait. */
__device__ __forceinline__ void
reg_fence(float *d, int n)
{
  for (int i = 0; i < n; i++) asm volatile("" : "+f"(d[i])::"memory");
}

/* Writes by ordinary stores (st.shared, cp.async) made visible to wgmma. */
__device__ __forceinline__ void
fence_proxy_async()
{
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

// ----------------------------------------------------------------------------
// cp.async (16 B, L2 only)

__device__ __forceinline__ void
cp_async16(uint32_t dst, const void *src)
{
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(src)
               : "memory");
}

__device__ __forceinline__ void
cp_async_commit()
{
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}

template <int N>
__device__ __forceinline__ void
cp_async_wait()
{
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
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
// wgmma issue (generated shapes: m64n64k16 SS, m64n128k16 RS)

// D[64 x 64] (+)= A[64 x 16] * B[16 x 64], both from shared memory.
template <int TA, int TB>
__device__ __forceinline__ void
wgmma_ss_n64(float *d, uint64_t desc_a, uint64_t desc_b, int accumulate)
{
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1, %35, %36;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "l"(desc_a), "l"(desc_b), "r"(accumulate), "n"(TA), "n"(TB));
}

// D[64 x 128] += A[64 x 16] (registers, bf16x2) * B[16 x 128] (shared memory).
template <int TB>
__device__ __forceinline__ void
wgmma_rs_n128(float *d, const uint32_t *a, uint64_t desc_b)
{
  asm volatile(
      "{\n.reg .pred p;\nsetp.eq.u32 p, 1, 1;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, {%64, %65, %66, %67}, %68, p, 1, 1, %69;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "n"(TB));
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
