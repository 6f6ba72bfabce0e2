/* tcgen05_hw.cuh — the tcgen05 primitives as inline PTX (sm_100a, sm_100f,
 * sm_103a; CCCL's cuda::ptx wrappers build for sm_100a only). See
 * tcgen05.cuh for the conventions. Compiled and SASS-checked here, never
 * run: no Blackwell GPU is available to this project. */
#pragma once
#include <stdint.h>

namespace tc05 {

/* Emulation hooks: nothing to do on hardware. */
struct emu_params {
  void *tmem;
};
__device__ __forceinline__ void emu_init(const emu_params &) {}
__device__ __forceinline__ void emu_run() {}
__device__ __forceinline__ void emu_stop() {}
constexpr bool emulated = false;
constexpr size_t emu_smem_bytes = 0;
constexpr size_t EMU_CTA_BYTES = 0; // global memory the emulation needs per CTA

/* Whole warp: allocate ncols columns (a power of 2 >= 32) of tensor memory;
 * the address lands in shared memory at smem_dst. */
__device__ __forceinline__ void
tmem_alloc(uint32_t smem_dst, uint32_t ncols)
{
  asm volatile("tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32 [%0], %1;\n"
               ::"r"(smem_dst), "r"(ncols) : "memory");
}

/* Whole warp: give up the right to allocate (lets a co-resident CTA in). */
__device__ __forceinline__ void
tmem_relinquish()
{
  asm volatile("tcgen05.relinquish_alloc_permit.cta_group::1.sync.aligned;\n" ::: "memory");
}

/* Whole warp: free what tmem_alloc gave. */
__device__ __forceinline__ void
tmem_dealloc(uint32_t taddr, uint32_t ncols)
{
  asm volatile("tcgen05.dealloc.cta_group::1.sync.aligned.b32 %0, %1;\n" ::"r"(taddr),
               "r"(ncols) : "memory");
}

/* One thread: D[tmem] (+)= A[smem desc] · B[smem desc]^T. */
__device__ __forceinline__ void
mma_ss(uint32_t d_tmem, uint64_t a_desc, uint64_t b_desc, uint32_t idesc, bool accumulate)
{
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %4, 0;\n"
      "tcgen05.mma.cta_group::1.kind::f16 [%0], %1, %2, %3, p;\n}\n"
      ::"r"(d_tmem), "l"(a_desc), "l"(b_desc), "r"(idesc), "r"((uint32_t)accumulate)
      : "memory");
}

/* One thread: D[tmem] (+)= A[tmem] · B[smem desc]^T (the "A from tensor
 * memory" form). */
__device__ __forceinline__ void
mma_ts(uint32_t d_tmem, uint32_t a_tmem, uint64_t b_desc, uint32_t idesc, bool accumulate)
{
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %4, 0;\n"
      "tcgen05.mma.cta_group::1.kind::f16 [%0], [%1], %2, %3, p;\n}\n"
      ::"r"(d_tmem), "r"(a_tmem), "l"(b_desc), "r"(idesc), "r"((uint32_t)accumulate)
      : "memory");
}

/* One thread: arrive once on mbar when every tcgen05.mma this thread issued
 * before has completed. */
__device__ __forceinline__ void
commit(uint32_t mbar)
{
  asm volatile(
      "tcgen05.commit.cta_group::1.mbarrier::arrive::one.shared::cluster.b64 [%0];\n"
      ::"r"(mbar) : "memory");
}

__device__ __forceinline__ void
wait_ld()
{
  asm volatile("tcgen05.wait::ld.sync.aligned;\n" ::: "memory");
}

__device__ __forceinline__ void
wait_st()
{
  asm volatile("tcgen05.wait::st.sync.aligned;\n" ::: "memory");
}

/* Order tensor-memory accesses before / after a thread synchronisation
 * (mbarrier, bar.sync). */
__device__ __forceinline__ void
fence_before()
{
  asm volatile("tcgen05.fence::before_thread_sync;\n" ::: "memory");
}

__device__ __forceinline__ void
fence_after()
{
  asm volatile("tcgen05.fence::after_thread_sync;\n" ::: "memory");
}

/* Whole warp, 32x32b shape: thread i reads lane (taddr.lane + i), columns
 * taddr.col .. +N-1 into r[0..N-1]. Needs wait_ld before r is used. */
template <int N>
__device__ __forceinline__ void ld_32x32b(uint32_t taddr, uint32_t (&r)[N]);

template <>
__device__ __forceinline__ void
ld_32x32b<32>(uint32_t taddr, uint32_t (&r)[32])
{
  asm volatile(
      "tcgen05.ld.sync.aligned.32x32b.x32.b32 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, "
      "%11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, "
      "%28, %29, %30, %31}, [%32];\n"
      : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]), "=r"(r[4]), "=r"(r[5]), "=r"(r[6]),
        "=r"(r[7]), "=r"(r[8]), "=r"(r[9]), "=r"(r[10]), "=r"(r[11]), "=r"(r[12]),
        "=r"(r[13]), "=r"(r[14]), "=r"(r[15]), "=r"(r[16]), "=r"(r[17]), "=r"(r[18]),
        "=r"(r[19]), "=r"(r[20]), "=r"(r[21]), "=r"(r[22]), "=r"(r[23]), "=r"(r[24]),
        "=r"(r[25]), "=r"(r[26]), "=r"(r[27]), "=r"(r[28]), "=r"(r[29]), "=r"(r[30]),
        "=r"(r[31])
      : "r"(taddr)
      : "memory");
}

template <>
__device__ __forceinline__ void
ld_32x32b<64>(uint32_t taddr, uint32_t (&r)[64])
{
  ld_32x32b<32>(taddr, reinterpret_cast<uint32_t(&)[32]>(r[0]));
  ld_32x32b<32>(taddr + 32, reinterpret_cast<uint32_t(&)[32]>(r[32]));
}

/* Whole warp, 32x32b shape: thread i writes r[0..N-1] to lane
 * (taddr.lane + i), columns taddr.col .. +N-1. wait_st before another
 * thread (or an MMA) relies on it. */
template <int N>
__device__ __forceinline__ void st_32x32b(uint32_t taddr, const uint32_t (&r)[N]);

template <>
__device__ __forceinline__ void
st_32x32b<32>(uint32_t taddr, const uint32_t (&r)[32])
{
  asm volatile(
      "tcgen05.st.sync.aligned.32x32b.x32.b32 [%0], {%1, %2, %3, %4, %5, %6, %7, %8, %9, %10, "
      "%11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, "
      "%28, %29, %30, %31, %32};\n"
      ::"r"(taddr), "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3]), "r"(r[4]), "r"(r[5]),
        "r"(r[6]), "r"(r[7]), "r"(r[8]), "r"(r[9]), "r"(r[10]), "r"(r[11]), "r"(r[12]),
        "r"(r[13]), "r"(r[14]), "r"(r[15]), "r"(r[16]), "r"(r[17]), "r"(r[18]), "r"(r[19]),
        "r"(r[20]), "r"(r[21]), "r"(r[22]), "r"(r[23]), "r"(r[24]), "r"(r[25]), "r"(r[26]),
        "r"(r[27]), "r"(r[28]), "r"(r[29]), "r"(r[30]), "r"(r[31])
      : "memory");
}

}  // namespace tc05
