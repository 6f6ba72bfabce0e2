/* wgmma.cuh — the Hopper-only (sm_90a) building blocks of the native
 * backward, as inline PTX (CCCL's cuda::ptx has no wgmma wrappers):
 * shared-memory matrix descriptors for 128-byte-swizzled bf16 tiles, wgmma
 * issue/commit/wait and cp.async. The generic pieces (tile layout,
 * mbarriers, TMA, bulk copies) are in common/async_copy.cuh.
 *
 * Descriptor fields follow the PTX ISA's "matrix descriptor" and
 * canonical-layout tables:
 *   K-major:  SBO = 1024 (next 8 rows), LBO unused; a k16 step = +32 B.
 *   MN-major: SBO = 1024 (next 8 K-rows), LBO = 8192 (next 64 MN columns);
 *             a k16 step = +2048 B (16 K-rows).
 */
#pragma once
#include <stdint.h>

#include "../common/async_copy.cuh"

// ----------------------------------------------------------------------------
// wgmma descriptors

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

/* The same for registers a running wgmma reads (RS A fragments): live, and
 * unchanged, up to this point. */
__device__ __forceinline__ void
reg_fence_u32(uint32_t *d, int n)
{
  for (int i = 0; i < n; i++) asm volatile("" : "+r"(d[i])::"memory");
}

// ----------------------------------------------------------------------------
// cp.async: global -> shared without passing through a register, so a load
// issued early costs no scoreboard wait until its value is read

/* 16 bytes, L2 only. */
__device__ __forceinline__ void
cp_async16(uint32_t dst, const void *src)
{
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(src)
               : "memory");
}

/* 4 bytes (4-byte aligned), L1-cached. */
__device__ __forceinline__ void
cp_async_4(uint32_t dst, const void *src)
{
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(dst), "l"(src) : "memory");
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

