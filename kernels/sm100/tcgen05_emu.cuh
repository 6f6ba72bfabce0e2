/* tcgen05_emu.cuh — a functional emulation of the tcgen05 primitives for
 * sm_90a, so the Blackwell backward's source runs on an H200 (see
 * tcgen05.cuh for the API and conventions; kernels/NOTES.md "sm100a" for
 * what the emulation proves and what it cannot).
 *
 *  - Tensor memory is global memory: 128 lanes x 512 columns of 32-bit
 *    words per CTA (emu_params.tmem, gridDim.x · 256 KB), lane-major.
 *  - tcgen05.mma and tcgen05.commit are queued, in issue order, in a ring
 *    in global memory. Two emulator warps (emu_run) execute them in
 *    order: they decode the shared-memory descriptors (umma_desc.h) into
 *    element addresses, copy the operands out of shared memory with the
 *    bulk-copy engine (the async proxy, as the tensor cores read them),
 *    multiply with mma.sync (bf16 in, fp32 accumulate) and read and write
 *    the tensor-memory words. Consecutive MMAs into one D (up to
 *    EMU_RUN_MAX, one K = 128 product) run as one batch: operands staged
 *    together, D held in registers across them, the same fp32 operations
 *    in the same order as one at a time (bitwise equal). A commit arrives on the kernel's real
 *    mbarrier once every earlier MMA is done. So every pipeline wait of the kernel is
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
  void *tmem;  // gridDim.x * EMU_CTA_BYTES
};

enum emu_op : uint32_t { EMU_MMA_SS = 1, EMU_MMA_TS = 2, EMU_COMMIT = 3, EMU_EXIT = 4 };

struct emu_cmd {
  uint64_t a, b;      // descriptors (a: tensor-memory address for TS)
  uint32_t op, d, idesc, accumulate, mbar, pad;
};

/* Per CTA in global memory: tensor memory (lane-major words), the command
 * ring and its head/tail counters, and the staging of one batch of MMAs' operands.
 * Nothing the emulation shares between its threads lives in shared memory
 * unless a barrier orders it, so compute-sanitizer racecheck sees only the
 * kernel's own shared-memory traffic. */
constexpr size_t EMU_TMEM_BYTES = (size_t)EMU_LANES * EMU_COLS * 4;
constexpr size_t EMU_RING_BYTES = EMU_QUEUE * sizeof(emu_cmd);
constexpr size_t EMU_STAGE_BYTES = 4096; // 256 16-byte chunks: an M = 128 or N <= 128, K = 16 operand
constexpr uint32_t EMU_RUN_MAX = 8;       // MMAs staged and executed as one batch (a K = 128 product)
constexpr size_t EMU_CTA_BYTES =
    EMU_TMEM_BYTES + EMU_RING_BYTES + 256 + 2 * EMU_RUN_MAX * EMU_STAGE_BYTES;

struct emu_ctx {
  uint32_t *tmem;
  emu_cmd *q;
  volatile uint32_t *ht; // ht[0] head (emulator), ht[1] tail (issuer)
  uint4 *stage_a, *stage_b;
  uint32_t tail;         // the issuer's own copy
  uint32_t avail;        // written by the emulator's thread 0 between its barriers
  uint32_t alloc_cols;
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
static __device__ __noinline__ void
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
  char *g = static_cast<char *>(p.tmem) + (size_t)blockIdx.x * EMU_CTA_BYTES;
  c.tmem = reinterpret_cast<uint32_t *>(g);
  c.q = reinterpret_cast<emu_cmd *>(g + EMU_TMEM_BYTES);
  c.ht = reinterpret_cast<volatile uint32_t *>(g + EMU_TMEM_BYTES + EMU_RING_BYTES);
  c.stage_a = reinterpret_cast<uint4 *>(g + EMU_TMEM_BYTES + EMU_RING_BYTES + 256);
  c.stage_b = c.stage_a + EMU_RUN_MAX * EMU_STAGE_BYTES / 16;
  c.ht[0] = c.ht[1] = 0;
  c.tail = c.avail = 0;
  c.alloc_cols = 0;
  __threadfence_block();
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
  if ((threadIdx.x & 31) == 0) // checked only: the kernel allocates once
    emu_check((taddr >> 16) == 0 && (taddr & 0xFFFF) + ncols == ctx().alloc_cols);
  __syncwarp();
}

/* One thread: append a command; waits while the ring is full. */
__device__ __forceinline__ void
push(const emu_cmd &cmd)
{
  emu_ctx &c = ctx();
  const uint32_t t = c.tail;
  for (long long spin = 0; t - c.ht[0] >= (uint32_t)EMU_QUEUE; spin++) emu_check(spin < (1ll << 32));
  c.q[t % EMU_QUEUE] = cmd;
  __threadfence_block();
  c.ht[1] = t + 1;
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

/* One thread, after its last commit: the emulator warps return. */
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
// The emulator warps

__device__ __forceinline__ void
emu_sync()
{
  // barrier.sync (not bar.sync): thread 0 arrives after spinning alone.
  asm volatile("barrier.sync %0, %1;\n" ::"n"(EMU_BARRIER), "n"(EMU_THREADS) : "memory");
}

/* A queued command, read past the L1 (the issuer wrote it). */
__device__ __forceinline__ emu_cmd
load_cmd(uint32_t i)
{
  const emu_cmd *q = ctx().q + i % EMU_QUEUE;
  emu_cmd c;
  c.a = __ldcg(&q->a);
  c.b = __ldcg(&q->b);
  c.op = __ldcg(&q->op);
  c.d = __ldcg(&q->d);
  c.idesc = __ldcg(&q->idesc);
  c.accumulate = __ldcg(&q->accumulate);
  c.mbar = __ldcg(&q->mbar);
  c.pad = 0;
  return c;
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

/* Copy an operand of `rows` (M or N) x K = 16 out of shared memory into
 * dst, as 16-byte chunks by the bulk-copy engine: shared memory is read by
 * the async proxy, as the tensor cores read it (so a writer's missing
 * fence.proxy.async is as wrong here as on hardware). Chunk order: K-major,
 * row r's K halves at 2r, 2r+1; MN-major, K index k's M groups of 8 at
 * k·rows/8 + g. */
__device__ __forceinline__ void
stage_operand(const vsa_umma_smem_fields &f, bool mn, uint32_t rows, uint4 *dst)
{
  const uint32_t groups = rows / 8;
  for (uint32_t x = threadIdx.x & 63; x < 2 * rows; x += EMU_THREADS) {
    const uint32_t src = mn ? vsa_umma_element_addr(&f, 1, 8 * (x % groups), x / groups)
                            : vsa_umma_element_addr(&f, 0, x / 2, 8 * (x % 2));
    asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], 16;\n"
                 ::"l"(dst + x), "r"(src) : "memory");
  }
  asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
}

/* Element (r, k) (r along M or N) of a staged operand, as 16 bits. */
__device__ __forceinline__ uint32_t
staged(const uint4 *st, bool mn, uint32_t rows, uint32_t r, uint32_t k)
{
  const uint16_t *h = reinterpret_cast<const uint16_t *>(st);
  return mn ? __ldcg(h + (k * (rows / 8) + r / 8) * 8 + r % 8) : __ldcg(h + (r * 2 + k / 8) * 8 + k % 8);
}

/* Two K-consecutive elements (k even) packed as the mma.sync fragments want. */
__device__ __forceinline__ uint32_t
pair(const uint4 *st, bool mn, uint32_t rows, uint32_t r, uint32_t k)
{
  if (!mn) return __ldcg(reinterpret_cast<const uint32_t *>(st) + (r * 2 + k / 8) * 4 + (k % 8) / 2);
  return staged(st, mn, rows, r, k) | (staged(st, mn, rows, r, k + 1) << 16);
}

/* A fragments (m16n8k16, row-major A) of rows mb..mb+15. */
__device__ __forceinline__ void
load_a(const emu_cmd &cmd, const uint4 *st, bool a_mn, uint32_t mb, uint32_t (&a)[4])
{
  const uint32_t lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
  if (cmd.op == EMU_MMA_TS) {
    const uint32_t lane0 = (uint32_t)(cmd.a >> 16), col0 = (uint32_t)cmd.a & 0xFFFF;
    a[0] = __ldcg(word(lane0 + mb + g, col0 + q));
    a[1] = __ldcg(word(lane0 + mb + g + 8, col0 + q));
    a[2] = __ldcg(word(lane0 + mb + g, col0 + 4 + q));
    a[3] = __ldcg(word(lane0 + mb + g + 8, col0 + 4 + q));
    return;
  }
  a[0] = pair(st, a_mn, 128, mb + g, 2 * q);
  a[1] = pair(st, a_mn, 128, mb + g + 8, 2 * q);
  a[2] = pair(st, a_mn, 128, mb + g, 2 * q + 8);
  a[3] = pair(st, a_mn, 128, mb + g + 8, 2 * q + 8);
}

/* Execute commands first .. first+n-1 (n <= EMU_RUN_MAX MMAs into one D
 * with one instruction descriptor, all but the first accumulating) with
 * the 64 emulator threads as one batch: every operand staged at once (one
 * wait, one barrier), then warp ew owns rows 64·ew .. +63, 32 columns of D
 * at a time, held in registers across the n MMAs (one tensor-memory read
 * and write per element a batch, not per MMA). The arithmetic is the
 * unbatched order exactly: per element of D, one m16n8k16 fp32
 * accumulation per K = 16 command, in issue order (the hardware model of
 * tcgen05_emu: a K = 16 MMA adds its 16 products to D in one step), so
 * results are bitwise those of one command at a time. */
static __device__ __noinline__ void
exec_run(uint32_t first, uint32_t n)
{
  emu_ctx &c = ctx();
  const emu_cmd c0 = load_cmd(first);
  const vsa_umma_idesc_fields id = vsa_umma_idesc_decode(c0.idesc);
  emu_check(id.m == 128 && id.n % 32 == 0 && id.n <= 128 && id.d_format == 1 &&
            id.a_format == 1 && id.b_format == 1 && !id.a_negate && !id.b_negate &&
            id.other == 0 && n >= 1 && n <= EMU_RUN_MAX);
  const uint32_t d_lane = c0.d >> 16, d_col = c0.d & 0xFFFF;
  emu_check(d_lane == 0 && d_col + id.n <= c.alloc_cols);
  const int ew = (threadIdx.x >> 5) & 1, lane = threadIdx.x & 31;
  const uint32_t g = lane >> 2, q = lane & 3;
  constexpr uint32_t STAGE = EMU_STAGE_BYTES / 16; // uint4 per staged operand
  // The operands of every command, through the async proxy into global
  // staging; a TS A must not overlap D (it is read while D is in registers).
  for (uint32_t x = 0; x < n; x++) {
    const emu_cmd cmd = load_cmd(first + x);
    if (cmd.op == EMU_MMA_SS) {
      stage_operand(smem_fields(cmd.a), id.a_mn, 128, c.stage_a + x * STAGE);
    } else {
      const uint32_t a_col = (uint32_t)cmd.a & 0xFFFF;
      emu_check((cmd.a >> 16) == 0 && a_col + 8 <= c.alloc_cols &&
                (a_col + 8 <= d_col || a_col >= d_col + id.n));
    }
    stage_operand(smem_fields(cmd.b), id.b_mn, id.n, c.stage_b + x * STAGE);
  }
  asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory");
  asm volatile("fence.proxy.async.global;\n" ::: "memory");
  __threadfence_block();
  emu_sync();
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
      const emu_cmd cmd = load_cmd(first + x);
      const uint4 *sb = c.stage_b + x * STAGE;
      uint32_t b[4][2]; // n8 tiles nc .. nc+31: (k 2q, k 2q+8) of column n = g
#pragma unroll
      for (int nt = 0; nt < 4; nt++) {
        b[nt][0] = pair(sb, id.b_mn, id.n, nc + 8 * nt + g, 2 * q);
        b[nt][1] = pair(sb, id.b_mn, id.n, nc + 8 * nt + g, 2 * q + 8);
      }
#pragma unroll
      for (int mt = 0; mt < 4; mt++) {
        uint32_t a[4];
        load_a(cmd, c.stage_a + x * STAGE, id.a_mn, 64 * ew + 16 * mt, a);
#pragma unroll
        for (int nt = 0; nt < 4; nt++) mma16816(acc[mt][nt], a, b[nt][0], b[nt][1]);
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
  __threadfence_block();
  emu_sync(); // D written, staging read: the next batch may reuse both
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
      for (long long spin = 0; c.ht[1] == head; spin++) emu_check(spin < (1ll << 34));
      __threadfence_block();
      c.avail = c.ht[1];
    }
    emu_sync();
    const uint32_t avail = c.avail;
    bool stop = false;
    while (head != avail) {
      const emu_cmd cmd = load_cmd(head);
      if (cmd.op == EMU_MMA_SS || cmd.op == EMU_MMA_TS) {
        uint32_t n = 1;
        while (head + n != avail && n < EMU_RUN_MAX) {
          const emu_cmd nx = load_cmd(head + n);
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
    emu_sync(); // every thread has read avail and the commands it executed
    if ((threadIdx.x & 63) == 0) c.ht[0] = head;
    if (stop) return;
  }
}

}  // namespace tc05
