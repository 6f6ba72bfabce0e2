/* test_builders.c — video block sizes and random top-k lists.
 *
 * The top-k rows are also regenerated here from the derivation documented
 * at the top of src/core/builders.c (with a 128-bit product instead of the
 * builder's 32-bit halves), so the comment and the code cannot drift apart.
 *
 * Build and run (from the repository root):
 *   gcc -std=c11 -O2 -Wall -Wextra -I src/core -I src/storage tests/c/test_builders.c \
 *     src/core/builders.c src/core/check.c -I/usr/local/cuda/include \
 *     -L/usr/local/cuda/lib64 -lcudart_static -ldl -lpthread -lrt -lm \
 *     -o /tmp/test_builders && /tmp/test_builders
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bsa.h"
#include "check.h"
#include "tensor.h"
#include "vsa_lists.h"

static int passed, failed;

#define CHECK(cond, ...)                                                     \
  do {                                                                       \
    int ok_ = (cond);                                                        \
    printf("%s ", ok_ ? "ok  " : "FAIL");                                    \
    printf(__VA_ARGS__);                                                     \
    printf("\n");                                                            \
    if (ok_) passed++; else failed++;                                        \
  } while (0)

// ----------------------------------------------------------------------------
// Video blocks

static void
test_video(int T, int Hh, int W, int want)
{
  int n = -1;
  int rc = vsa_build_video_blocks(T, Hh, W, 4, 4, 4, NULL, &n);
  CHECK(rc == 0 && n == want, "video %dx%dx%d / 4x4x4 -> %d blocks (got %d)",
        T, Hh, W, want, n);
  int32_t *vbs = malloc((size_t)n * sizeof *vbs);
  rc = vsa_build_video_blocks(T, Hh, W, 4, 4, 4, vbs, &n);
  int64_t sum = 0;
  int in_range = 1, full = 0;
  for (int j = 0; j < n; j++) {
    sum += vbs[j];
    in_range &= vbs[j] >= 1 && vbs[j] <= 64;
    full += vbs[j] == 64;
  }
  CHECK(rc == 0 && sum == (int64_t)T * Hh * W && in_range,
        "  sizes in [1, 64] sum to the latent volume %d (got %lld)",
        T * Hh * W, (long long)sum);
  /* Full tiles: floor of each extent over the tile. */
  int want_full = (T / 4) * (Hh / 4) * (W / 4);
  CHECK(full == want_full, "  %d full tiles (got %d)", want_full, full);
  free(vbs);
}

static void
test_video_layout(void)
{
  /* 5x4x6 with 4x4x4 tiles: t tiles {4, 1}, h {4}, w {4, 2}. */
  int32_t vbs[8];
  int n = 0;
  int rc = vsa_build_video_blocks(5, 4, 6, 4, 4, 4, vbs, &n);
  CHECK(rc == 0 && n == 4 && vbs[0] == 64 && vbs[1] == 32 && vbs[2] == 16 &&
            vbs[3] == 8,
        "5x4x6 blocks in (t, h, w) row-major order: 64 32 16 8 (got %d %d %d "
        "%d)", vbs[0], vbs[1], vbs[2], vbs[3]);
  /* Non-cubic tile 1x8x8. */
  rc = vsa_build_video_blocks(3, 9, 8, 1, 8, 8, vbs, &n);
  CHECK(rc == 0 && n == 6 && vbs[0] == 64 && vbs[1] == 8 && vbs[5] == 8,
        "3x9x8 with 1x8x8 tiles: 6 blocks, 64 8 ... 8");
  CHECK(vsa_build_video_blocks(21, 30, 52, 4, 4, 2, NULL, &n) == -1 &&
            strstr(vsa_last_error(), "volume"),
        "tile volume 32 rejected: \"%s\"", vsa_last_error());
  CHECK(vsa_build_video_blocks(0, 30, 52, 4, 4, 4, NULL, &n) == -1,
        "empty latent rejected: \"%s\"", vsa_last_error());
}

// ----------------------------------------------------------------------------
// Random top-k

/* The documented derivation, written out again. */
static uint64_t
fin(uint64_t z)
{
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

static uint64_t mix(uint64_t x) { return fin(x + 0x9E3779B97F4A7C15ull); }

static uint32_t
below(uint64_t *s, uint32_t n)
{
  *s += 0x9E3779B97F4A7C15ull;
  __extension__ unsigned __int128 p = (unsigned __int128)fin(*s) * n;
  return (uint32_t)(p >> 64);
}

static int
regen_row(uint64_t seed, int b, int h, int i, int nkv, int topk, int ragged,
          int32_t *out)
{
  uint64_t s = mix(mix(mix(mix(seed) ^ (uint64_t)b) ^ (uint64_t)h) ^
                   (uint64_t)i);
  int count = ragged ? (int)below(&s, (uint32_t)topk + 1) : topk;
  int32_t *perm = malloc((size_t)nkv * sizeof *perm);
  for (int j = 0; j < nkv; j++) perm[j] = j;
  for (int k = 0; k < count; k++) {
    int j = k + (int)below(&s, (uint32_t)(nkv - k));
    int32_t t = perm[k];
    perm[k] = perm[j];
    perm[j] = t;
    out[k] = perm[k];
  }
  free(perm);
  return count;
}

typedef struct {
  int B, H, nq, nkv, topk, width, ragged;
} topk_shape;

static void
build(const topk_shape *s, uint64_t seed, int32_t **idx, int32_t **num)
{
  size_t rows = (size_t)s->B * s->H * s->nq;
  *idx = malloc(rows * s->width * sizeof **idx);
  *num = malloc(rows * sizeof **num);
  int rc = vsa_build_random_topk(s->B, s->H, s->nq, s->nkv, s->topk, s->width,
                                 s->ragged, seed, *idx, *num);
  if (rc) printf("build failed: %s\n", vsa_last_error());
}

static void
test_topk(const topk_shape *s, uint64_t seed)
{
  int32_t *idx, *num;
  build(s, seed, &idx, &num);
  size_t rows = (size_t)s->B * s->H * s->nq;
  int distinct = 1, in_range = 1, tails = 1, counts = 1, regen = 1;
  int sorted_rows = 0, zero_rows = 0, full_rows = 0;
  uint8_t *seen = calloc((size_t)s->nkv, 1);
  int32_t *row2 = malloc(((size_t)s->topk + 1) * sizeof *row2);
  for (size_t r = 0; r < rows; r++) {
    const int32_t *row = idx + r * s->width;
    int c = num[r];
    counts &= s->ragged ? (c >= 0 && c <= s->topk) : c == s->topk;
    zero_rows += c == 0;
    full_rows += c == s->topk;
    int sorted = 1;
    for (int k = 0; k < c; k++) {
      in_range &= row[k] >= 0 && row[k] < s->nkv;
      if (row[k] >= 0 && row[k] < s->nkv) {
        distinct &= !seen[row[k]];
        seen[row[k]] = 1;
      }
      if (k) sorted &= row[k] > row[k - 1];
    }
    sorted_rows += sorted && c > 1;
    for (int k = 0; k < c; k++)
      if (row[k] >= 0 && row[k] < s->nkv) seen[row[k]] = 0;
    for (int k = c; k < s->width; k++) tails &= row[k] == -1;
    int i = (int)(r % s->nq), h = (int)(r / s->nq % s->H),
        b = (int)(r / s->nq / s->H);
    int c2 = regen_row(seed, b, h, i, s->nkv, s->topk, s->ragged, row2);
    regen &= c2 == c && !memcmp(row2, row, (size_t)c * sizeof *row);
  }
  CHECK(counts && distinct && in_range && tails,
        "topk B=%d H=%d nq=%d nkv=%d topk=%d width=%d ragged=%d seed=%llu: "
        "counts, distinct, in range, -1 tails", s->B, s->H, s->nq, s->nkv,
        s->topk, s->width, s->ragged, (unsigned long long)seed);
  CHECK(regen, "  rows regenerate from the documented derivation");
  if (s->topk >= 4 && s->nkv >= 8)
    CHECK(sorted_rows < (int)rows / 4 + 1,
          "  rows in draw order, not sorted (%d of %zu ascending)",
          sorted_rows, rows);
  if (s->ragged && rows >= 200)
    CHECK(zero_rows > 0 && full_rows > 0,
          "  ragged counts reach 0 (%d rows) and topk (%d rows)", zero_rows,
          full_rows);

  int32_t *idx2, *num2, *idx3, *num3;
  build(s, seed, &idx2, &num2);
  build(s, seed + 1, &idx3, &num3);
  size_t bytes = rows * s->width * sizeof *idx;
  CHECK(!memcmp(idx, idx2, bytes) && !memcmp(num, num2, rows * sizeof *num),
        "  same seed, same bits");
  if (s->topk > 0 && s->nkv > 1)
    CHECK(memcmp(idx, idx3, bytes) != 0, "  seed + 1 gives other lists");
  free(idx2);
  free(num2);
  free(idx3);
  free(num3);
  free(seen);
  free(row2);
  free(idx);
  free(num);
}

static void
test_topk_misc(void)
{
  /* A row keeps its list when the shape around it grows. */
  topk_shape a = {1, 2, 5, 30, 6, 6, 0}, b = {2, 4, 9, 30, 6, 8, 0};
  int32_t *ia, *na, *ib, *nb;
  build(&a, 99, &ia, &na);
  build(&b, 99, &ib, &nb);
  /* (b=0, h=1, i=3) in both. */
  const int32_t *ra = ia + ((0 * 2 + 1) * 5 + 3) * 6;
  const int32_t *rb = ib + ((0 * 4 + 1) * 9 + 3) * 8;
  CHECK(!memcmp(ra, rb, 6 * sizeof *ra),
        "row (b=0, h=1, q block=3) independent of B, H, nq, width");
  free(ia);
  free(na);
  free(ib);
  free(nb);

  /* topk = nkv: every row a permutation. */
  topk_shape p = {1, 1, 20, 12, 12, 12, 0};
  int32_t *ip, *np;
  build(&p, 5, &ip, &np);
  int perm_ok = 1;
  for (int r = 0; r < 20; r++) {
    int sum = 0;
    for (int k = 0; k < 12; k++) sum += ip[r * 12 + k];
    perm_ok &= sum == 66;
  }
  CHECK(perm_ok, "topk = nkv gives permutations");
  free(ip);
  free(np);

  int32_t idx[64], num[8];
  CHECK(vsa_build_random_topk(1, 1, 2, 4, 5, 8, 0, 1, idx, num) == -1 &&
            strstr(vsa_last_error(), "topk") && strstr(vsa_last_error(), "nkv"),
        "topk > nkv rejected: \"%s\"", vsa_last_error());
  CHECK(vsa_build_random_topk(1, 1, 2, 8, 5, 4, 0, 1, idx, num) == -1 &&
            strstr(vsa_last_error(), "width"),
        "topk > width rejected: \"%s\"", vsa_last_error());
  CHECK(vsa_build_random_topk(0, 1, 2, 8, 1, 4, 0, 1, idx, num) == -1 &&
            strstr(vsa_last_error(), "B "),
        "B = 0 rejected: \"%s\"", vsa_last_error());
  CHECK(vsa_build_random_topk(1, 1, -2, 8, 1, 4, 0, 1, idx, num) == -1 &&
            strstr(vsa_last_error(), "nq"),
        "nq < 0 rejected: \"%s\"", vsa_last_error());
  CHECK(vsa_build_random_topk(1, 1, 2, 8, -1, 4, 0, 1, idx, num) == -1 &&
            strstr(vsa_last_error(), "topk"),
        "topk < 0 rejected: \"%s\"", vsa_last_error());
}

// ----------------------------------------------------------------------------
// Block 128

static void
test_video_128(void)
{
  /* Wan 720P's latent 21x45x80 in FastVideo's 128-token tiles 2x8x8:
   * t tiles 10 of 2 and one of 1, h 5 of 8 and one of 5, w 10 of 8. */
  int n = 0;
  CHECK(vsa_build_video_blocks(21, 45, 80, 2, 8, 8, NULL, &n) == 0 && n == 11 * 6 * 10,
        "21x45x80 in 2x8x8 tiles: 660 blocks (got %d)", n);
  int32_t *vbs = malloc(660 * sizeof *vbs);
  vsa_build_video_blocks(21, 45, 80, 2, 8, 8, vbs, &n);
  long long sum = 0;
  for (int j = 0; j < n; j++) sum += vbs[j];
  int last = (10 * 6 + 5) * 10 + 9, edge_h = (0 * 6 + 5) * 10 + 0, edge_t = (10 * 6 + 0) * 10;
  CHECK(sum == 21 * 45 * 80 && vbs[0] == 128 && vbs[edge_h] == 80 && vbs[edge_t] == 64 &&
            vbs[last] == 40,
        "  sizes sum to 75600; full 128, h edge 2*5*8 = 80, t edge 1*8*8 = 64, corner 40 "
        "(got %d %d %d %d)", vbs[0], vbs[edge_h], vbs[edge_t], vbs[last]);
  free(vbs);
  CHECK(vsa_build_video_blocks(4, 8, 8, 2, 4, 8, NULL, &n) == 0 && n == 4,
        "tile 2x4x8 (volume 64) and 2x8x8 (volume 128) both build");
  CHECK(vsa_build_video_blocks(4, 8, 8, 2, 8, 6, NULL, &n) == -1 &&
            strstr(vsa_last_error(), "64, 128"),
        "tile volume 96 rejected naming the supported sizes: \"%s\"", vsa_last_error());
}

/* FastVideo's selection on a case computed by hand, at block blk, D = 4
 * (1/sqrt(D) = 0.5 exactly). Pooled means (padding past vbs holds 100, so
 * summing it would show):
 *   q0 (vbs blk): tokens alternate (2,0,0,0) and 0      -> (1, 0, 0, 0)
 *   q1 (vbs 3):   (3,3,0,0), 0, (0,3,0,0)               -> (1, 2, 0, 0)
 *   q2 (vbs 0):   empty: keeps nothing
 *   k0 (vbs blk): all (0,1,0,0)                         -> (0, 1, 0, 0)
 *   k1 (vbs 3):   all (1,0,0,0)                         -> (1, 0, 0, 0)
 *   k2 (vbs 0):   empty: never kept
 *   k3 (vbs blk): all (1,0,0,0)                         -> (1, 0, 0, 0)
 * Scores q0: k0 0, k1 0.5, k3 0.5; q1: k0 1, k1 0.5, k3 0.5. Ties go to
 * the lower kv index. */
static void
test_vsa_topk_by_hand(int blk)
{
  const int D = 4, nq = 3, nkv = 4;
  uint16_t *q = malloc((size_t)nq * blk * D * 2), *k = malloc((size_t)nkv * blk * D * 2);
  const uint16_t pad = vsa_f32_to_bf16(100.f);
  for (int x = 0; x < nq * blk * D; x++) q[x] = pad;
  for (int x = 0; x < nkv * blk * D; x++) k[x] = pad;
#define SET(a, blkid, t, d, v) a[((size_t)(blkid) * blk + (t)) * D + (d)] = vsa_f32_to_bf16(v)
  for (int t = 0; t < blk; t++)
    for (int d = 0; d < D; d++) {
      SET(q, 0, t, d, d == 0 && t % 2 == 0 ? 2.f : 0.f);
      SET(k, 0, t, d, d == 1 ? 1.f : 0.f);
      SET(k, 3, t, d, d == 0 ? 1.f : 0.f);
      if (t < 3) SET(k, 1, t, d, d == 0 ? 1.f : 0.f);
      if (t < 3) SET(q, 1, t, d, 0.f);
    }
  SET(q, 1, 0, 0, 3.f);
  SET(q, 1, 0, 1, 3.f);
  SET(q, 1, 2, 1, 3.f);
#undef SET
  const int32_t q_vbs[3] = {blk, 3, 0}, kv_vbs[4] = {blk, 3, 0, blk};
  struct { int topk; int32_t rows[3][4]; int32_t num[3]; } want[] = {
      {1, {{1, -1, -1, -1}, {0, -1, -1, -1}, {-1, -1, -1, -1}}, {1, 1, 0}},
      {2, {{1, 3, -1, -1}, {0, 1, -1, -1}, {-1, -1, -1, -1}}, {2, 2, 0}},
      {4, {{0, 1, 3, -1}, {0, 1, 3, -1}, {-1, -1, -1, -1}}, {3, 3, 0}},
  };
  for (int c = 0; c < 3; c++) {
    int32_t idx[3 * 4], num[3];
    for (int x = 0; x < 12; x++) idx[x] = 77; /* poison */
    num[0] = num[1] = num[2] = 77;
    int rc = vsa_build_vsa_topk(q, k, 1, blk, nq, nkv, D, q_vbs, kv_vbs, want[c].topk, 4, idx,
                                num, 1);
    int ok = rc == 0;
    for (int i = 0; i < 3; i++) {
      ok &= num[i] == want[c].num[i];
      for (int x = 0; x < 4; x++) ok &= idx[i * 4 + x] == want[c].rows[i][x];
    }
    CHECK(ok, "block %d, topk %d: rows {%d %d %d} {%d %d %d} {} as computed by hand "
              "(got num %d %d %d, rows %d %d %d | %d %d %d)", blk, want[c].topk,
          want[c].rows[0][0], want[c].rows[0][1], want[c].rows[0][2], want[c].rows[1][0],
          want[c].rows[1][1], want[c].rows[1][2], num[0], num[1], num[2], idx[0], idx[1],
          idx[2], idx[4], idx[5], idx[6]);
  }
  int32_t idx[12], num[3];
  CHECK(vsa_build_vsa_topk(q, k, 1, 96, 2, 2, D, q_vbs, kv_vbs, 1, 4, idx, num, 1) == -1 &&
            strstr(vsa_last_error(), "64, 128"),
        "vsa_topk: block 96 rejected: \"%s\"", vsa_last_error());
  int32_t big[4] = {blk + 1, 3, 0, blk};
  CHECK(vsa_build_vsa_topk(q, k, 1, blk, nq, nkv, D, q_vbs, big, 1, 4, idx, num, 1) == -1,
        "vsa_topk: a vbs past the block (%d) rejected: \"%s\"", blk + 1, vsa_last_error());
  free(q);
  free(k);
}

int
main(void)
{
  test_video(21, 30, 52, 624);
  test_video(21, 45, 80, 1440);
  test_video(1, 1, 1, 1);
  test_video(4, 4, 4, 1);
  test_video_layout();

  static const topk_shape shapes[] = {
      {2, 3, 50, 40, 10, 12, 0},  {2, 3, 50, 40, 10, 12, 1},
      {1, 2, 90, 90, 22, 22, 0},  {1, 4, 64, 64, 16, 64, 1},
      {1, 1, 7, 1, 1, 1, 0},      {1, 1, 9, 5, 0, 3, 0},
      {1, 2, 30, 1440, 360, 360, 0},
  };
  for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
    test_topk(&shapes[s], 0x5eed0000u + s);
  test_topk_misc();
  test_video_128();
  test_vsa_topk_by_hand(64);
  test_vsa_topk_by_hand(128);

  printf("%d passed, %d failed\n", passed, failed);
  return failed != 0;
}
