/* tcgen05_emu.cuh — a functional emulation of the tcgen05 primitives for
 * sm_90a, so the Blackwell backward's source runs on an H200 (see
 * tcgen05.cuh for the API and conventions; kernels/NOTES.md "sm100a" for
 * what the emulation proves and what it cannot).
 *
 *  - Tensor memory is global memory: 128 lanes x 512 columns of 32-bit
 *    words per CTA (emu_params.tmem, gridDim.x · 256 KB), lane-major.
 *  - tcgen05.mma and tcgen05.commit are queued, in issue order, in a ring
 *    in shared memory. Two emulator warps (emu_run) execute them in
 *    order: they decode the shared-memory descriptors (umma_desc.h) into
 *    element addresses, loads fragments with ldmatrix and multiplies with
 *    mma.sync (bf16 in, fp32 accumulate), reading and writing the tensor
 *    memory words; a commit arrives on the kernel's real mbarrier once
 *    every earlier MMA is done. So every pipeline wait of the kernel is
 *    real, and an operand overwritten before its MMA ran shows up as a
 *    wrong result.
 *  - tcgen05.ld/st check the lane-quarter rule (warp w reaches lanes
 *    32·(w % 4) .. +31 only) and the allocated columns, and trap otherwise;
 *    so do unsupported descriptors (M != 128, N not a multiple of 32,
 *    non-bf16 types, a descriptor version other than 1, a base offset).
 * The emulator warps are warps 10 and 11 of the kernel (idle in the
 * hardware build), so both builds have the same threads and registers.
 * What it cannot check: the async-proxy fences (its reads are generic),
 * tensor-memory access timing, and the hardware's own reading of the
 * descriptors (the decode is validated against wgmma on the H200, which
 * reads the same canonical layouts: tests/gpu/umma_decode_test.cu).
 */
#pragma once
#include <stdint.h>
#include <stdio.h>

#include "umma_desc.h"

namespace tc05 {

constexpr bool emulated = true;
constexpr int EMU_QUEUE = 64;       // queued commands
constexpr int EMU_COLS = 512;       // tensor-memory columns per CTA
constexpr int EMU_LANES = 128;
constexpr int EMU_BARRIER = 15;     // named barrier of the two emulator warps
constexpr int EMU_THREADS = 64;

struct emu_params {
  void *tmem;  // gridDim.x * 128 * 512 words
};

enum emu_op : uint32_t { EMU_MMA_SS = 1, EMU_MMA_TS = 2, EMU_COMMIT = 3, EMU_EXIT = 4 };

struct emu_cmd {
  uint64_t a, b;      // descriptors (a: tensor-memory address for TS)
  uint32_t op, d, idesc, accumulate, mbar, pad;
};

struct emu_ctx {
  uint32_t *tmem;
  volatile uint32_t head, tail, avail;
  uint32_t alloc_cols;
  emu_cmd q[EMU_QUEUE];
};

constexpr size_t emu_smem_bytes = sizeof(emu_ctx);

__device__ __forceinline__ emu_ctx &
ctx()
{
  __shared__ emu_ctx c;
  return c;
}

/* A failed check prints where (device printf reaches the host when the
 * context is torn down) and traps, rather than computing garbage. */
#define emu_check(ok) emu_check_at((ok), __LINE__)
__device__ __noinline__ void
emu_fail(int line)
{
  printf("tcgen05 emulation: check at tcgen05_emu.cuh:%d failed (block %d, thread %d)\n", line,
         blockIdx.x, threadIdx.x);
  __trap();
}
__device__ __forceinline__ void
emu_check_at(bool ok, int line)
{
  if (!ok) emu_fail(line);
}

/* One thread, before the kernel's first __syncthreads. */
__device__ __forceinline__ void
emu_init(const emu_params &p)
{
  emu_ctx &c = ctx();
  c.tmem = static_cast<uint32_t *>(p.tmem) + (size_t)blockIdx.x * EMU_LANES * EMU_COLS;
  c.head = c.tail = c.avail = 0;
  c.alloc_cols = 0;
}

__device__ __forceinline__ void
tmem_alloc(uint32_t smem_dst, uint32_t ncols)
{
  if ((threadIdx.x & 31) == 0) {
    emu_ctx &c = ctx();
    emu_check(ncols >= 32 && (ncols & (ncols - 1)) == 0 && c.alloc_cols + ncols <= EMU_COLS);
    asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(smem_dst), "r"(c.alloc_cols) : "memory");
    c.alloc_cols += ncols;
  }
  __syncwarp();
}

__device__ __forceinline__ void tmem_relinquish() {}

__device__ __forceinline__ void
tmem_dealloc(uint32_t taddr, uint32_t ncols)
{
  if ((threadIdx.x & 31) == 0) {
    emu_ctx &c = ctx();
    emu_check((taddr >> 16) == 0 && (taddr & 0xFFFF) + ncols == c.alloc_cols);
    c.alloc_cols -= ncols;
  }
  __syncwarp();
}

/* One thread: append a command; waits while the ring is full. */
__device__ __forceinline__ void
push(const emu_cmd &cmd)
{
  emu_ctx &c = ctx();
  const uint32_t t = c.tail;
  for (long long spin = 0; t - c.head >= (uint32_t)EMU_QUEUE; spin++) emu_check(spin < (1ll << 32));
  c.q[t % EMU_QUEUE] = cmd;
  __threadfence_block();
  c.tail = t + 1;
}

__device__ __forceinline__ void
mma_ss(uint32_t d_tmem, uint64_t a_desc, uint64_t b_desc, uint32_t idesc, bool accumulate)
{
  emu_cmd cmd = {a_desc, b_desc, EMU_MMA_SS, d_tmem, idesc, (uint32_t)accumulate, 0, 0};
  push(cmd);
}

__device__ __forceinline__ void
mma_ts(uint32_t d_tmem, uint32_t a_tmem, uint64_t b_desc, uint32_t idesc, bool accumulate)
{
  emu_cmd cmd = {a_tmem, b_desc, EMU_MMA_TS, d_tmem, idesc, (uint32_t)accumulate, 0, 0};
  push(cmd);
}

__device__ __forceinline__ void
commit(uint32_t mbar)
{
  emu_cmd cmd = {0, 0, EMU_COMMIT, 0, 0, 0, mbar, 0};
  push(cmd);
}

/* One thread, after its last commit: the emulator warpgroup returns. */
__device__ __forceinline__ void
emu_stop()
{
  emu_cmd cmd = {0, 0, EMU_EXIT, 0, 0, 0, 0, 0};
  push(cmd);
}

__device__ __forceinline__ void wait_ld() {}
__device__ __forceinline__ void wait_st() { __threadfence_block(); }
__device__ __forceinline__ void fence_before() { __threadfence_block(); }
__device__ __forceinline__ void fence_after() { __threadfence_block(); }

/* The word of lane l, column col of this CTA's tensor memory. */
__device__ __forceinline__ uint32_t *
word(uint32_t lane, uint32_t col)
{
  return ctx().tmem + (size_t)lane * EMU_COLS + col;
}

/* The checks of a 32x32b access of n columns at taddr by this warp. */
__device__ __forceinline__ void
check_access(uint32_t taddr, int n)
{
  const uint32_t lane = taddr >> 16, col = taddr & 0xFFFF;
  emu_check(lane == 32u * ((threadIdx.x >> 5) & 3u));
  emu_check(col + n <= ctx().alloc_cols);
}

template <int N>
__device__ __forceinline__ void
ld_32x32b(uint32_t taddr, uint32_t (&r)[N])
{
  check_access(taddr, N);
  const uint32_t *w = word((taddr >> 16) + (threadIdx.x & 31), taddr & 0xFFFF);
#pragma unroll
  for (int j = 0; j < N; j++) r[j] = __ldcg(w + j);
}

template <int N>
__device__ __forceinline__ void
st_32x32b(uint32_t taddr, const uint32_t (&r)[N])
{
  check_access(taddr, N);
  uint32_t *w = word((taddr >> 16) + (threadIdx.x & 31), taddr & 0xFFFF);
#pragma unroll
  for (int j = 0; j < N; j++) __stcg(w + j, r[j]);
}

// ----------------------------------------------------------------------------
// The emulator warpgroup

__device__ __forceinline__ void
emu_sync()
{
  asm volatile("bar.sync %0, %1;\n" ::"n"(EMU_BARRIER), "n"(EMU_THREADS) : "memory");
}

__device__ __forceinline__ void
ldsm_x4(uint32_t addr, uint32_t (&r)[4], bool trans)
{
  if (trans)
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
  else
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}

__device__ __forceinline__ void
mma16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1)
{
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
      "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* Decoded descriptor fields, checked for what the emulation models. */
__device__ __forceinline__ vsa_umma_smem_fields
smem_fields(uint64_t desc)
{
  vsa_umma_smem_fields f = vsa_umma_smem_decode(desc);
  emu_check(f.version == 1 && f.base_offset == 0 && f.lbo_mode == 0 &&
            (f.swizzle == VSA_UMMA_SWIZZLE_NONE || f.swizzle == VSA_UMMA_SWIZZLE_32B ||
             f.swizzle == VSA_UMMA_SWIZZLE_64B || f.swizzle == VSA_UMMA_SWIZZLE_128B));
  return f;
}

/* A fragments (m16n8k16, row-major A) of rows mb..mb+15, K 0..15. */
__device__ __forceinline__ void
load_a(const emu_cmd &cmd, const vsa_umma_smem_fields &fa, bool a_mn, uint32_t mb,
       uint32_t (&a)[4])
{
  const int lane = threadIdx.x & 31, mat = lane >> 3, r = lane & 7;
  if (cmd.op == EMU_MMA_TS) {
    const uint32_t lane0 = (uint32_t)(cmd.a >> 16), col0 = (uint32_t)cmd.a & 0xFFFF;
    const uint32_t g = lane >> 2, q = lane & 3;
    a[0] = __ldcg(word(lane0 + mb + g, col0 + q));
    a[1] = __ldcg(word(lane0 + mb + g + 8, col0 + q));
    a[2] = __ldcg(word(lane0 + mb + g, col0 + 4 + q));
    a[3] = __ldcg(word(lane0 + mb + g + 8, col0 + 4 + q));
    return;
  }
  uint32_t addr;
  if (!a_mn) // row m of the 8x8 matrix: 8 K elements
    addr = vsa_umma_element_addr(&fa, 0, mb + r + 8 * (mat & 1), 8 * (mat >> 1));
  else       // row k of the 8x8 matrix: 8 M elements, transposed on load
    addr = vsa_umma_element_addr(&fa, 1, mb + 8 * (mat & 1), 8 * (mat >> 1) + r);
  ldsm_x4(addr, a, a_mn);
}

/* B fragments of the n8 tiles nb and nb+8 (b[0], b[1]: tile nb; b[2], b[3]:
 * tile nb+8), K 0..15. */
__device__ __forceinline__ void
load_b(const vsa_umma_smem_fields &fb, bool b_mn, uint32_t nb, uint32_t (&b)[4])
{
  const int lane = threadIdx.x & 31, mat = lane >> 3, r = lane & 7;
  uint32_t addr;
  if (!b_mn)
    addr = vsa_umma_element_addr(&fb, 0, nb + r + 8 * (mat >> 1), 8 * (mat & 1));
  else
    addr = vsa_umma_element_addr(&fb, 1, nb + 8 * (mat >> 1), 8 * (mat & 1) + r);
  ldsm_x4(addr, b, b_mn);
}

/* Execute q[first .. first+n) (MMAs into one D with one instruction
 * descriptor, all but the first accumulating) with the 64 emulator
 * threads: warp ew owns rows 64·ew .. +63, 32 columns of D at a time. */
__device__ __noinline__ void
exec_run(uint32_t first, uint32_t n)
{
  emu_ctx &c = ctx();
  const emu_cmd &c0 = c.q[first % EMU_QUEUE];
  const vsa_umma_idesc_fields id = vsa_umma_idesc_decode(c0.idesc);
  emu_check(id.m == 128 && id.n % 32 == 0 && id.n <= 256 && id.d_format == 1 &&
            id.a_format == 1 && id.b_format == 1 && !id.a_negate && !id.b_negate &&
            id.other == 0);
  const uint32_t d_lane = c0.d >> 16, d_col = c0.d & 0xFFFF;
  emu_check(d_lane == 0 && d_col + id.n <= c.alloc_cols);
  const int ew = (threadIdx.x >> 5) & 1, lane = threadIdx.x & 31;
  const uint32_t g = lane >> 2, q = lane & 3;
  for (uint32_t nc = 0; nc < id.n; nc += 32) {
    float acc[4][4][4];
#pragma unroll
    for (int mt = 0; mt < 4; mt++)
#pragma unroll
      for (int nt = 0; nt < 4; nt++) {
        const uint32_t m = 64 * ew + 16 * mt + g, col = d_col + nc + 8 * nt + 2 * q;
        if (c0.accumulate) {
          acc[mt][nt][0] = __uint_as_float(__ldcg(word(m, col)));
          acc[mt][nt][1] = __uint_as_float(__ldcg(word(m, col + 1)));
          acc[mt][nt][2] = __uint_as_float(__ldcg(word(m + 8, col)));
          acc[mt][nt][3] = __uint_as_float(__ldcg(word(m + 8, col + 1)));
        } else {
          acc[mt][nt][0] = acc[mt][nt][1] = acc[mt][nt][2] = acc[mt][nt][3] = 0.f;
        }
      }
    for (uint32_t x = 0; x < n; x++) {
      const emu_cmd &cmd = c.q[(first + x) % EMU_QUEUE];
      vsa_umma_smem_fields fa = {}, fb = smem_fields(cmd.b);
      if (cmd.op == EMU_MMA_SS) fa = smem_fields(cmd.a);
      else emu_check((cmd.a >> 16) == 0 && (cmd.a & 0xFFFF) + 8 <= c.alloc_cols);
      uint32_t b[2][4];
      load_b(fb, id.b_mn, nc, b[0]);
      load_b(fb, id.b_mn, nc + 16, b[1]);
#pragma unroll
      for (int mt = 0; mt < 4; mt++) {
        uint32_t a[4];
        load_a(cmd, fa, id.a_mn, 64 * ew + 16 * mt, a);
#pragma unroll
        for (int np = 0; np < 2; np++) {
          mma16816(acc[mt][2 * np], a, b[np][0], b[np][1]);
          mma16816(acc[mt][2 * np + 1], a, b[np][2], b[np][3]);
        }
      }
    }
#pragma unroll
    for (int mt = 0; mt < 4; mt++)
#pragma unroll
      for (int nt = 0; nt < 4; nt++) {
        const uint32_t m = 64 * ew + 16 * mt + g, col = d_col + nc + 8 * nt + 2 * q;
        __stcg(word(m, col), __float_as_uint(acc[mt][nt][0]));
        __stcg(word(m, col + 1), __float_as_uint(acc[mt][nt][1]));
        __stcg(word(m + 8, col), __float_as_uint(acc[mt][nt][2]));
        __stcg(word(m + 8, col + 1), __float_as_uint(acc[mt][nt][3]));
      }
  }
}

/* The two emulator warps (64 threads): execute queued commands in order
 * until EMU_EXIT. */
__device__ __forceinline__ void
emu_run()
{
  emu_ctx &c = ctx();
  uint32_t head = 0;
  for (;;) {
    if ((threadIdx.x & 63) == 0) {
      for (long long spin = 0; c.tail == head; spin++) emu_check(spin < (1ll << 34));
      __threadfence_block();
      c.avail = c.tail;
    }
    emu_sync();
    const uint32_t avail = c.avail;
    bool stop = false;
    while (head != avail) {
      const emu_cmd &cmd = c.q[head % EMU_QUEUE];
      if (cmd.op == EMU_MMA_SS || cmd.op == EMU_MMA_TS) {
        uint32_t n = 1;
        while (head + n != avail) {
          const emu_cmd &nx = c.q[(head + n) % EMU_QUEUE];
          if ((nx.op != EMU_MMA_SS && nx.op != EMU_MMA_TS) || nx.d != cmd.d ||
              nx.idesc != cmd.idesc || !nx.accumulate)
            break;
          n++;
        }
        exec_run(head, n);
        head += n;
      } else if (cmd.op == EMU_COMMIT) {
        __threadfence_block();
        emu_sync(); // every thread's tensor-memory writes are done
        if ((threadIdx.x & 63) == 0)
          asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(cmd.mbar) : "memory");
        head++;
      } else {
        emu_check(cmd.op == EMU_EXIT);
        head++;
        stop = true;
        break;
      }
    }
    emu_sync(); // every thread has read the commands it executed
    if ((threadIdx.x & 63) == 0) c.head = head;
    if (stop) return;
  }
}

}  // namespace tc05
