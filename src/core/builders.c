/* builders.c — block-list and block-size metadata for experiments.
 *
 * vsa_build_random_topk: random top-k q2k lists, reproducible from a seed.
 * vsa_build_video_blocks: variable_block_sizes for a tiled video latent.
 *
 * The random lists must be regenerable outside vsalab (Python, Lua with a
 * 64-bit integer library), so the derivation is spelled out here exactly.
 * All arithmetic is on unsigned 64-bit integers, modulo 2^64.
 *
 *   fin(z):  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9
 *            z = (z ^ (z >> 27)) * 0x94D049BB133111EB
 *            return z ^ (z >> 31)                 (splitmix64's finaliser)
 *   mix(x):  fin(x + 0x9E3779B97F4A7C15)          (first splitmix64 output
 *                                                  of a stream at state x)
 *   row state:  s = mix(mix(mix(mix(seed) ^ b) ^ h) ^ i)
 *     (b, h, i: batch, head, q block as non-negative integers; the state
 *     does not depend on B, H or nq, so a row keeps its list when the
 *     shape around it grows)
 *   next():     s = s + 0x9E3779B97F4A7C15; return fin(s)
 *   below(n):   floor(next() * n / 2^64)          (n < 2^31; the 128-bit
 *     product's high word; bias < n / 2^64, immaterial)
 *
 *   count = topk, or below(topk + 1) when ragged (this draw comes first);
 *   perm = [0, 1, ..., nkv - 1];
 *   for k in 0 .. count-1:  j = k + below(nkv - k); swap(perm[k], perm[j]);
 *                           idx[b,h,i,k] = perm[k]
 *   idx[b,h,i,count:width] = -1;  num[b,h,i] = count.
 *
 * Python twin of one row (for the record):
 *   M = 2**64 - 1; G = 0x9E3779B97F4A7C15
 *   def fin(z):
 *     z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M
 *     z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M
 *     return z ^ (z >> 31)
 *   mix = lambda x: fin((x + G) & M)
 */
#include <stdlib.h>

#include "bsa.h"
#include "check.h"

// ----------------------------------------------------------------------------
// splitmix64 stream per row

#define SM64_GOLDEN 0x9E3779B97F4A7C15ull

static uint64_t
sm64_fin(uint64_t z)
{
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

static uint64_t
sm64_mix(uint64_t x)
{
  return sm64_fin(x + SM64_GOLDEN);
}

static uint64_t
sm64_next(uint64_t *s)
{
  *s += SM64_GOLDEN;
  return sm64_fin(*s);
}

/* floor(x * n / 2^64) without a 128-bit type: split x into 32-bit halves;
 * exact because n < 2^32 keeps every partial product below 2^64. */
static uint32_t
sm64_below(uint64_t *s, uint32_t n)
{
  uint64_t x = sm64_next(s);
  uint64_t hi = (x >> 32) * n, lo = (x & 0xffffffffull) * n;
  return (uint32_t)((hi + (lo >> 32)) >> 32);
}

static uint64_t
row_state(uint64_t seed, int b, int h, int i)
{
  uint64_t s = sm64_mix(seed);
  s = sm64_mix(s ^ (uint64_t)b);
  s = sm64_mix(s ^ (uint64_t)h);
  return sm64_mix(s ^ (uint64_t)i);
}

// ----------------------------------------------------------------------------
// Random top-k lists

int
vsa_build_random_topk(int B, int H, int nq, int nkv, int topk, int width,
                      int ragged, uint64_t seed, int32_t *idx, int32_t *num)
{
  if (B <= 0) return vsa_fail("random_topk: B must be positive, got %d", B);
  if (H <= 0) return vsa_fail("random_topk: H must be positive, got %d", H);
  if (nq <= 0) return vsa_fail("random_topk: nq must be positive, got %d", nq);
  if (nkv <= 0)
    return vsa_fail("random_topk: nkv must be positive, got %d", nkv);
  if (width <= 0)
    return vsa_fail("random_topk: width must be positive, got %d", width);
  if (topk < 0)
    return vsa_fail("random_topk: topk must be >= 0, got %d", topk);
  if (topk > nkv)
    return vsa_fail("random_topk: topk %d exceeds nkv %d", topk, nkv);
  if (topk > width)
    return vsa_fail("random_topk: topk %d exceeds width %d", topk, width);
  if (!idx || !num) return vsa_fail("random_topk: idx and num are required");

  /* perm stays the identity between rows: each row's swaps are undone in
   * reverse, which costs O(count) instead of O(nkv) per row. */
  int32_t *perm = malloc((size_t)nkv * sizeof *perm);
  int32_t *swaps = malloc(((size_t)topk + 1) * sizeof *swaps);
  if (!perm || !swaps) {
    free(perm);
    free(swaps);
    return vsa_fail("random_topk: out of host memory (nkv %d)", nkv);
  }
  for (int j = 0; j < nkv; j++) perm[j] = j;

  for (int b = 0; b < B; b++)
    for (int h = 0; h < H; h++)
      for (int i = 0; i < nq; i++) {
        int64_t r = ((int64_t)b * H + h) * nq + i;
        int32_t *row = idx + r * width;
        uint64_t s = row_state(seed, b, h, i);
        int count = ragged ? (int)sm64_below(&s, (uint32_t)topk + 1) : topk;
        for (int k = 0; k < count; k++) {
          int j = k + (int)sm64_below(&s, (uint32_t)(nkv - k));
          int32_t t = perm[k];
          perm[k] = perm[j];
          perm[j] = t;
          swaps[k] = j;
          row[k] = perm[k];
        }
        for (int k = count; k < width; k++) row[k] = -1;
        num[r] = count;
        for (int k = count - 1; k >= 0; k--) {
          int j = swaps[k];
          int32_t t = perm[k];
          perm[k] = perm[j];
          perm[j] = t;
        }
      }
  free(perm);
  free(swaps);
  return 0;
}

// ----------------------------------------------------------------------------
// Video latent tiles

int
vsa_build_video_blocks(int T, int Hh, int W, int tT, int tH, int tW,
                       int32_t *vbs, int *nblocks)
{
  if (T <= 0 || Hh <= 0 || W <= 0)
    return vsa_fail("video_blocks: latent %dx%dx%d must be positive", T, Hh,
                    W);
  if (tT <= 0 || tH <= 0 || tW <= 0)
    return vsa_fail("video_blocks: tile %dx%dx%d must be positive", tT, tH,
                    tW);
  if ((int64_t)tT * tH * tW > VSA_BLOCK_MAX ||
      !vsa_block_supported(tT * tH * tW))
    return vsa_fail("video_blocks: tile %dx%dx%d has volume %lld, not a supported "
                    "block size (%s)", tT, tH, tW, (long long)tT * tH * tW,
                    vsa_block_sizes_text());
  if (!nblocks) return vsa_fail("video_blocks: nblocks is required");

  int64_t nt = (T + tT - 1) / tT, nh = (Hh + tH - 1) / tH,
          nw = (W + tW - 1) / tW;
  int64_t n = nt * nh * nw;
  if (n > INT32_MAX)
    return vsa_fail("video_blocks: %lld blocks overflow int", (long long)n);
  *nblocks = (int)n;
  if (!vbs) return 0;

  for (int64_t it = 0; it < nt; it++) {
    int et = (int)(T - it * tT < tT ? T - it * tT : tT);
    for (int64_t ih = 0; ih < nh; ih++) {
      int eh = (int)(Hh - ih * tH < tH ? Hh - ih * tH : tH);
      for (int64_t iw = 0; iw < nw; iw++) {
        int ew = (int)(W - iw * tW < tW ? W - iw * tW : tW);
        vbs[(it * nh + ih) * nw + iw] = et * eh * ew;
      }
    }
  }
  return 0;
}
