/* tcgen05_ladder.cu — the first rungs of the Blackwell first-contact ladder
 * (tests/gpu/run.sh blackwell), one program built twice:
 *   tcgen05_ladder      sm_100a/sm_100f/sm_103a, the hardware tcgen05 layer:
 *                       ready to run on a B200/GB200/B300 as is (no
 *                       Blackwell GPU is available to this project: never
 *                       run here);
 *   tcgen05_ladder_emu  sm_90a over the emulated layer, run on the H200;
 *                       it also checks every shared-memory operand with
 *                       wgmma, which reads the same canonical layouts, so
 *                       the descriptors the kernel builds are those the
 *                       tensor cores read.
 * Rung 1: tensor memory alloc, tcgen05.st, tcgen05.ld round trip, per lane
 * quarter, and dealloc. Rung 2: one MMA chain of each shape the sm100a
 * backward issues, built with the kernel's own descriptors and layouts:
 *   S    M128 N64  K128  SS, K-major A (Q pair), K-major B (K)
 *   dV^T M128 N64  K128  SS, MN-major A (dO pair), MN-major B (P)
 *   dQ   M128 N128 K64   TS, A from tensor memory (dS), MN-major B (K)
 * and the block-128 kernel's (bsa_bwd_b128_sm100a.cu), every tile 128 x 128:
 *   S    M128 N128 K128  SS, K-major A (Q) and B (K)
 *   dV^T M128 N128 K128  SS, MN-major A (dO) and B (P)
 *   dQ   M128 N128 K128  SS, K-major A (dS), MN-major B (K)
 * against a host fp64 GEMM of the same bf16 values (rel L2 < 1e-5).
 * Stops at the first failing rung; exit status 0 only when all pass.
 */
#include <cuda_bf16.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../kernels/common/async_copy.cuh"
#include "../../kernels/sm100/tcgen05.cuh"
#ifdef VSA_TCGEN05_EMU
#include "../../kernels/sm90/wgmma.cuh"
#endif

#define CHECK(x)                                                                         \
  do {                                                                                   \
    cudaError_t e_ = (x);                                                                \
    if (e_ != cudaSuccess) {                                                             \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      exit(1);                                                                           \
    }                                                                                    \
  } while (0)

constexpr uint32_t REGION = 8192;
enum shape_id { S_KK = 0, DV_MNMN = 1, DQ_TS = 2, S128_KK = 3, DV128_MNMN = 4, DQ128_SS = 5, SHAPES = 6 };
static const char *const shape_names[] = {"S    M128 N64  K128 SS K/K  ",
                                          "dV^T M128 N64  K128 SS MN/MN",
                                          "dQ   M128 N128 K64  TS   /MN ",
                                          "block 128: S    M128 N128 K128 SS K/K  ",
                                          "block 128: dV^T M128 N128 K128 SS MN/MN",
                                          "block 128: dQ   M128 N128 K128 SS K/MN "};

/* Smem: A tiles (32 KB), B tiles (32 KB), barrier, tmem slot. */
constexpr uint32_t OFF_A = 0, OFF_B = 4 * REGION, OFF_BAR = 8 * REGION, SMEM = OFF_BAR + 1024 + 1024;

struct args {
  const uint16_t *a, *b; // logical row-major sources (see fill)
  float *d;              // [128][N] out: tcgen05 result
  float *w;              // [128][N] out: wgmma result (emulated build)
  uint32_t *rt;          // rung 1: 128 x 64 words out
  int shape;
  tc05::emu_params emu;
};

/* Element (r, c) of a 64-column swizzled region at base (the TMA layout). */
__device__ __forceinline__ void
put(unsigned char *base, int r, int c, uint16_t v)
{
  *reinterpret_cast<uint16_t *>(base + sw128_offset(r, c)) = v;
}

__global__ void __launch_bounds__(192, 1)
ladder_kernel(const __grid_constant__ args g)
{
#if (defined(VSA_TCGEN05_EMU) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ == 900) || \
    (!defined(VSA_TCGEN05_EMU) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 1000)
  extern __shared__ __align__(1024) unsigned char raw[];
  const uint32_t base = (smem_addr(raw) + 1023) & ~1023u;
  unsigned char *bp = raw + (base - smem_addr(raw));
  const int t = threadIdx.x, warp = t >> 5;
  const uint32_t bar = base + OFF_BAR, slot = base + OFF_BAR + 8;
  if (t == 0) {
    tc05::emu_init(g.emu);
    mbar_init(bar, 1);
    fence_mbar_init();
  }
  if (warp == 0) tc05::tmem_alloc(slot, 512);
  tc05::fence_before();
  __syncthreads();
  tc05::fence_after();
  const uint32_t tmem = *reinterpret_cast<volatile uint32_t *>(bp + OFF_BAR + 8);
  if (warp >= 4) { // the emulator (emulated build); idle otherwise
    tc05::emu_run();
    return;
  }
  const uint32_t lane_base = (uint32_t)(warp * 32) << 16;
  if (g.shape < 0) { // rung 1: st then ld 64 columns per lane, at column 100
    uint32_t r[32];
    for (int h = 0; h < 2; h++) {
#pragma unroll
      for (int x = 0; x < 32; x++) r[x] = 0x9E3779B9u * (uint32_t)(t * 64 + h * 32 + x + 1);
      tc05::st_32x32b<32>(tmem + lane_base + 100 + 32 * h, r);
    }
    tc05::wait_st();
    tc05::fence_before();
    named_sync_any(1, 128); // the emulator warps are not part of this
    tc05::fence_after();
    uint32_t back[64];
    tc05::ld_32x32b<64>(tmem + lane_base + 100, back);
    tc05::wait_ld();
    for (int x = 0; x < 64; x++) g.rt[t * 64 + x] = back[x];
  } else {
    // Operands in the kernel's layouts. A pair (S, dV^T): logical [128 rows
    // of tokens][128 d], stored [d half][row][64] in 16 KB halves. B: S: K
    // [64 kv][128 d] as two regions; dV^T: P [128 q][64 kv] one 16 KB tile;
    // dQ: K [64 kv][128 d] as two regions.
    for (int i = t; i < 128 * 128; i += 128) {
      const int r = i / 128, c = i % 128;
      if (g.shape != DQ_TS) put(bp + OFF_A + (c / 64) * 2 * REGION, r, c % 64, g.a[i]);
    }
    const bool b128 = g.shape >= S128_KK; // block 128: B [128][128] as two 16 KB halves
    const int brows = g.shape == DV_MNMN || b128 ? 128 : 64, bcols = g.shape == DV_MNMN ? 64 : 128;
    for (int i = t; i < brows * bcols; i += 128) {
      const int r = i / bcols, c = i % bcols;
      put(bp + OFF_B + (c / 64) * (b128 ? 2 : 1) * REGION, r, c % 64, g.b[i]);
    }
    if (g.shape == DQ_TS) { // A = dS [128 q][64 kv] bf16 into tensor memory
      uint32_t w[32];
#pragma unroll
      for (int x = 0; x < 32; x++)
        w[x] = (uint32_t)g.a[t * 64 + 2 * x] | ((uint32_t)g.a[t * 64 + 2 * x + 1] << 16);
      tc05::st_32x32b<32>(tmem + lane_base + 192, w);
      tc05::wait_st();
    }
    fence_proxy_async();
    tc05::fence_before();
    named_sync_any(1, 128);
    tc05::fence_after();
    const int n = g.shape == DQ_TS || b128 ? 128 : 64;
    if (t == 0) {
      auto desc = [&](uint32_t a, uint32_t lbo) {
        return vsa_umma_smem_desc(a, lbo, 1024, VSA_UMMA_SWIZZLE_128B);
      };
      if (g.shape == S_KK) {
        const uint32_t id = vsa_umma_idesc_bf16(128, 64, 0, 0);
        for (int kk = 0; kk < 8; kk++)
          tc05::mma_ss(tmem, desc(base + OFF_A + (kk >> 2) * 2 * REGION + (kk & 3) * 32, 16),
                       desc(base + OFF_B + (kk >> 2) * REGION + (kk & 3) * 32, 16), id, kk > 0);
      } else if (g.shape == DV_MNMN) {
        const uint32_t id = vsa_umma_idesc_bf16(128, 64, 1, 1);
        for (int kk = 0; kk < 8; kk++)
          tc05::mma_ss(tmem, desc(base + OFF_A + kk * 2048, 2 * REGION),
                       desc(base + OFF_B + kk * 2048, 2 * REGION), id, kk > 0);
      } else if (g.shape == S128_KK || g.shape == DQ128_SS) {
        // bsa_bwd_b128_sm100a.cu: S = Q K^T (K-major B), dQ = dS K (MN-major B)
        const bool dq = g.shape == DQ128_SS;
        const uint32_t id = vsa_umma_idesc_bf16(128, 128, 0, dq);
        for (int kk = 0; kk < 8; kk++) {
          const uint32_t k = (kk >> 2) * 2 * REGION + (kk & 3) * 32;
          tc05::mma_ss(tmem, desc(base + OFF_A + k, 16),
                       dq ? desc(base + OFF_B + kk * 2048, 2 * REGION) : desc(base + OFF_B + k, 16),
                       id, kk > 0);
        }
      } else if (g.shape == DV128_MNMN) { // dV^T += dO^T P
        const uint32_t id = vsa_umma_idesc_bf16(128, 128, 1, 1);
        for (int kk = 0; kk < 8; kk++)
          tc05::mma_ss(tmem, desc(base + OFF_A + kk * 2048, 2 * REGION),
                       desc(base + OFF_B + kk * 2048, 2 * REGION), id, kk > 0);
      } else {
        const uint32_t id = vsa_umma_idesc_bf16(128, 128, 0, 1);
        for (int kk = 0; kk < 4; kk++)
          tc05::mma_ts(tmem, tmem + 192 + 8 * kk, desc(base + OFF_B + kk * 2048, REGION), id, kk > 0);
      }
      tc05::commit(bar);
    }
    mbar_wait(bar, 0);
    tc05::fence_after();
    for (int c0 = 0; c0 < n; c0 += 64) {
      uint32_t d[64];
      tc05::ld_32x32b<64>(tmem + lane_base + c0, d);
      tc05::wait_ld();
      for (int x = 0; x < 64; x++) g.d[t * n + c0 + x] = __uint_as_float(d[x]);
    }
#ifdef VSA_TCGEN05_EMU
    // The same shared memory through wgmma, with the Hopper descriptor of
    // the same start, LBO and SBO (128B swizzle: 1 in bits 62-63).
    if (g.shape == S_KK || g.shape == DV_MNMN) {
      float acc[32];
      for (int x = 0; x < 32; x++) acc[x] = 0.f;
      for (int half = 0; half < 2; half++) { // M = 128 as two m64 halves
        wgmma_fence();
        for (int kk = 0; kk < 8; kk++) {
          uint64_t da, db;
          if (g.shape == S_KK) {
            da = make_desc(base + OFF_A + half * REGION + (kk >> 2) * 2 * REGION + (kk & 3) * 32, 16, 1024);
            db = make_desc(base + OFF_B + (kk >> 2) * REGION + (kk & 3) * 32, 16, 1024);
            wgmma_ss_n64<0, 0>(acc, da, db, kk > 0);
          } else {
            da = make_desc(base + OFF_A + half * 2 * REGION + kk * 2048, 2 * REGION, 1024);
            db = make_desc(base + OFF_B + kk * 2048, 2 * REGION, 1024);
            wgmma_ss_n64<1, 1>(acc, da, db, kk > 0);
          }
        }
        wgmma_commit();
        wgmma_wait<0>();
        reg_fence(acc, 32);
        const int lane = t & 31, r0 = half * 64 + warp * 16 + (lane >> 2);
        for (int jn = 0; jn < 8; jn++) {
          const int col = jn * 8 + 2 * (lane & 3);
          g.w[r0 * 64 + col] = acc[4 * jn];
          g.w[r0 * 64 + col + 1] = acc[4 * jn + 1];
          g.w[(r0 + 8) * 64 + col] = acc[4 * jn + 2];
          g.w[(r0 + 8) * 64 + col + 1] = acc[4 * jn + 3];
        }
      }
    }
#endif
  }
  tc05::fence_before();
  named_sync_any(1, 128);
  if (t == 0) tc05::emu_stop();
  if (warp == 0) {
    tc05::fence_after();
    tc05::tmem_dealloc(tmem, 512);
  }
#endif
}

static float bf16_to_float(uint16_t v)
{
  uint32_t u = (uint32_t)v << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

static uint16_t float_to_bf16(float f)
{
  uint32_t u;
  memcpy(&u, &f, 4);
  return (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

static double rel_l2(const float *x, const double *ref, int n)
{
  double num = 0, den = 0;
  for (int i = 0; i < n; i++) {
    if (!isfinite(x[i])) return INFINITY;
    num += (x[i] - ref[i]) * (x[i] - ref[i]);
    den += ref[i] * ref[i];
  }
  return sqrt(num / den);
}

int main(void)
{
  int dev = 0, cc_major = 0, cc_minor = 0, sms = 0;
  CHECK(cudaGetDevice(&dev));
  CHECK(cudaDeviceGetAttribute(&cc_major, cudaDevAttrComputeCapabilityMajor, dev));
  CHECK(cudaDeviceGetAttribute(&cc_minor, cudaDevAttrComputeCapabilityMinor, dev));
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  printf("tcgen05 ladder (%s build) on compute capability %d.%d\n",
         tc05::emulated ? "emulated sm_90a" : "hardware", cc_major, cc_minor);
  cudaFuncAttributes fa;
  if (cudaFuncGetAttributes(&fa, ladder_kernel) != cudaSuccess) {
    printf("no kernel image for this device: the %s build needs %s\n",
           tc05::emulated ? "emulated" : "hardware",
           tc05::emulated ? "an sm_90 GPU" : "a Blackwell GPU (cc 10.0 / 10.3)");
    return 2;
  }
  CHECK(cudaFuncSetAttribute(ladder_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, SMEM));
  uint16_t *a, *b;
  float *d, *w;
  uint32_t *rt;
  void *tm;
  CHECK(cudaMalloc(&a, 128 * 128 * 2));
  CHECK(cudaMalloc(&b, 128 * 128 * 2));
  CHECK(cudaMalloc(&d, 128 * 128 * 4));
  CHECK(cudaMalloc(&w, 128 * 128 * 4));
  CHECK(cudaMalloc(&rt, 128 * 64 * 4));
  CHECK(cudaMalloc(&tm, tc05::EMU_CTA_BYTES > 0 ? tc05::EMU_CTA_BYTES : 16));
  args g = {a, b, d, w, rt, -1, {tm}};

  // Rung 1.
  CHECK(cudaMemset(rt, 0xFF, 128 * 64 * 4));
  ladder_kernel<<<1, 192, SMEM>>>(g);
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  static uint32_t hrt[128 * 64];
  CHECK(cudaMemcpy(hrt, rt, sizeof hrt, cudaMemcpyDeviceToHost));
  int wrong = 0;
  for (int t = 0; t < 128; t++)
    for (int x = 0; x < 64; x++) wrong += hrt[t * 64 + x] != 0x9E3779B9u * (uint32_t)(t * 64 + x + 1);
  printf("rung 1: tensor memory alloc/st/ld/dealloc round trip, 128 lanes x 64 columns: %s (%d wrong)\n",
         wrong ? "FAIL" : "ok", wrong);
  if (wrong) return 1;

  // Rung 2.
  static uint16_t ha[128 * 128], hb[128 * 128];
  static float hd[128 * 128], hw[128 * 128];
  static double ref[128 * 128];
  uint64_t seed = 0x243F6A8885A308D3ull;
  for (int shape = 0; shape < SHAPES; shape++) {
    for (int i = 0; i < 128 * 128; i++) {
      seed = seed * 6364136223846793005ull + 1442695040888963407ull;
      ha[i] = float_to_bf16((float)((int)(seed >> 40) % 2001 - 1000) / 500.f);
      seed = seed * 6364136223846793005ull + 1442695040888963407ull;
      hb[i] = float_to_bf16((float)((int)(seed >> 40) % 2001 - 1000) / 500.f);
    }
    // Logical products, as the kernel means them:
    //   S:    D[q][kv] = Σ_d A[q][d]  B[kv][d]    (A [128][128], B [64][128])
    //   dV^T: D[d][kv] = Σ_q A[q][d]  B[q][kv]    (A [128][128], B [128][64])
    //   dQ:   D[q][d]  = Σ_kv A[q][kv] B[kv][d]   (A [128][64],  B [64][128])
    // and at block 128 the same with every extent 128.
    const int n = shape >= DQ_TS ? 128 : 64;
    for (int m = 0; m < 128; m++)
      for (int j = 0; j < n; j++) {
        double s = 0;
        if (shape == S_KK)
          for (int k = 0; k < 128; k++) s += (double)bf16_to_float(ha[m * 128 + k]) * bf16_to_float(hb[j * 128 + k]);
        else if (shape == DV_MNMN)
          for (int k = 0; k < 128; k++) s += (double)bf16_to_float(ha[k * 128 + m]) * bf16_to_float(hb[k * 64 + j]);
        else if (shape == S128_KK)
          for (int k = 0; k < 128; k++) s += (double)bf16_to_float(ha[m * 128 + k]) * bf16_to_float(hb[j * 128 + k]);
        else if (shape == DV128_MNMN)
          for (int k = 0; k < 128; k++) s += (double)bf16_to_float(ha[k * 128 + m]) * bf16_to_float(hb[k * 128 + j]);
        else if (shape == DQ128_SS)
          for (int k = 0; k < 128; k++) s += (double)bf16_to_float(ha[m * 128 + k]) * bf16_to_float(hb[k * 128 + j]);
        else
          for (int k = 0; k < 64; k++) s += (double)bf16_to_float(ha[m * 64 + k]) * bf16_to_float(hb[k * 128 + j]);
        ref[m * n + j] = s;
      }
    CHECK(cudaMemcpy(a, ha, sizeof ha, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(b, hb, sizeof hb, cudaMemcpyHostToDevice));
    CHECK(cudaMemset(d, 0xFF, 128 * 128 * 4)); // NaN: a missed element fails
    CHECK(cudaMemset(w, 0xFF, 128 * 128 * 4));
    g.shape = shape;
    ladder_kernel<<<1, 192, SMEM>>>(g);
    CHECK(cudaGetLastError());
    CHECK(cudaDeviceSynchronize());
    CHECK(cudaMemcpy(hd, d, 128 * n * 4, cudaMemcpyDeviceToHost));
    const double e = rel_l2(hd, ref, 128 * n);
    printf("rung 2: %s tcgen05 rel L2 %.2e", shape_names[shape], e);
    int fail = !(e < 1e-5);
    if (tc05::emulated && (shape == S_KK || shape == DV_MNMN)) {
      CHECK(cudaMemcpy(hw, w, 128 * n * 4, cudaMemcpyDeviceToHost));
      const double ew = rel_l2(hw, ref, 128 * n);
      printf(", wgmma on the same shared memory %.2e", ew);
      fail |= !(ew < 1e-5);
    }
    printf(": %s\n", fail ? "FAIL" : "ok");
    if (fail) { // where: rel L2 per 32-row x 32-column block of D
      for (int m0 = 0; m0 < 128; m0 += 32) {
        printf("  rows %3d-%3d:", m0, m0 + 31);
        for (int j0 = 0; j0 < n; j0 += 32) {
          double num = 0, den = 0;
          for (int m = m0; m < m0 + 32; m++)
            for (int j = j0; j < j0 + 32; j++) {
              const double x = hd[m * n + j], r = ref[m * n + j];
              num += (x - r) * (x - r);
              den += r * r;
            }
          printf(" %.1e", sqrt(num / den));
        }
        printf("\n");
      }
      return 1;
    }
  }
  printf("ladder rungs 1-2 passed\n");
  (void)sms;
  return 0;
}
