/* test_layout.c — the token layouts (bsa.h, vsa_layout) in the host
 * reference and the fp64 oracle: a random problem (B, H > 1, Sq != Skv,
 * partly filled and empty kv blocks, ragged lists with count-0 rows) runs
 * in BHSD and, on the same data transposed, in BSHD. The two layouts run
 * the same arithmetic in the same order, so every BSHD output must be the
 * transposed BHSD output bit for bit (o, lse, Delta, dq, dk, dv of the
 * reference; o, lse, dq, dk, dv of the oracle, whole and as a spot check).
 * Also: the offset helpers against the plain index formulas, the layout
 * names, and an unknown layout refused by both.
 */
#include "bsa.h"
#include "check.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int n_pass, n_fail;

static void
check(int ok, const char *what)
{
  printf("%s %s\n", ok ? "PASS" : "FAIL", what);
  if (ok) n_pass++;
  else n_fail++;
}

#include "test_rng.h"

/* A bf16 of a uniform value in [-2, 2): the top half of its f32 bits. */
static uint16_t
rng_bf16(void)
{
  float f = (float)((rng_next() >> 11) * 0x1.0p-53 * 4.0 - 2.0);
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return (uint16_t)(u >> 16);
}

/* Element index of (b, h, t, d) in a layout, written out plainly. */
static int64_t
index_of(int layout, int H, int S, int D, int b, int h, int t, int d)
{
  return layout == VSA_BSHD ? (((int64_t)b * S + t) * H + h) * D + d
                            : (((int64_t)b * H + h) * S + t) * D + d;
}

/* BHSD [B,H,S,D] -> BSHD [B,S,H,D], any element size. */
static void
to_bshd(const void *src, void *dst, size_t esz, int B, int H, int S, int D)
{
  for (int b = 0; b < B; b++)
    for (int h = 0; h < H; h++)
      for (int t = 0; t < S; t++)
        memcpy((char *)dst + index_of(VSA_BSHD, H, S, D, b, h, t, 0) * esz,
               (const char *)src + index_of(VSA_BHSD, H, S, D, b, h, t, 0) * esz,
               (size_t)D * esz);
}

static int
same_bytes(const void *a, const void *b, size_t n)
{
  return memcmp(a, b, n) == 0;
}

/* x (BSHD) equals ref (BHSD) transposed, byte for byte. */
static int
same_transposed(const void *x, const void *ref, size_t esz, int B, int H,
                int S, int D)
{
  void *t = malloc((size_t)B * H * S * D * esz);
  to_bshd(ref, t, esz, B, H, S, D);
  int ok = same_bytes(x, t, (size_t)B * H * S * D * esz);
  free(t);
  return ok;
}

static void
test_helpers(void)
{
  int ok = 1;
  const int B = 2, H = 3, S = 5, D = 4;
  for (int L = 0; L < 2; L++)
    for (int b = 0; b < B; b++)
      for (int h = 0; h < H; h++)
        for (int t = 0; t < S; t++)
          ok &= vsa_head_offset(L, H, S, D, (int64_t)b * H + h) +
                    t * vsa_token_stride(L, H, D) ==
                index_of(L, H, S, D, b, h, t, 0);
  check(ok, "vsa_head_offset + t*vsa_token_stride index both layouts");
  /* The last element of a tensor past 2^31 elements, in 64 bits. */
  const int BH = 16, Sb = 1 << 20, Db = 128;
  check(vsa_head_offset(VSA_BSHD, BH, Sb, Db, BH - 1) +
                (int64_t)(Sb - 1) * vsa_token_stride(VSA_BSHD, BH, Db) +
                Db - 1 ==
            (int64_t)BH * Sb * Db - 1,
        "offsets past 2^31 elements (BSHD, H 16, S 2^20, D 128)");
  check(vsa_layout_parse("bhsd") == VSA_BHSD &&
            vsa_layout_parse("bshd") == VSA_BSHD &&
            vsa_layout_parse("bsdh") == -1 && vsa_layout_parse(NULL) == -1,
        "vsa_layout_parse");
  check(strcmp(vsa_layout_name(VSA_BHSD), "bhsd") == 0 &&
            strcmp(vsa_layout_name(VSA_BSHD), "bshd") == 0 &&
            vsa_layout_name(2) == NULL,
        "vsa_layout_name");
}

static void
test_problem(int block)
{
  const int B = 2, H = 3, D = 32, nq = 3, nkv = 4;
  const int Sq = nq * block, Skv = nkv * block, width = nkv;
  const int64_t nqe = (int64_t)B * H * Sq * D, nke = (int64_t)B * H * Skv * D;
  const int64_t BH = (int64_t)B * H;
  char what[160];

  uint16_t *q = malloc(nqe * 2), *dO = malloc(nqe * 2), *o16 = malloc(nqe * 2);
  uint16_t *k = malloc(nke * 2), *v = malloc(nke * 2);
  uint16_t *qs = malloc(nqe * 2), *dOs = malloc(nqe * 2), *o16s = malloc(nqe * 2);
  uint16_t *ks = malloc(nke * 2), *vs = malloc(nke * 2);
  for (int64_t i = 0; i < nqe; i++) q[i] = rng_bf16(), dO[i] = rng_bf16();
  for (int64_t i = 0; i < nke; i++) k[i] = rng_bf16(), v[i] = rng_bf16();

  /* Lists: ragged counts (0 included) of distinct kv blocks; vbs with a
   * full, a partial, an empty and a one-token block. */
  int32_t *q2k_idx = malloc(BH * nq * width * 4), *q2k_num = malloc(BH * nq * 4);
  int32_t *k2q_idx = malloc(BH * nkv * nq * 4), *k2q_num = malloc(BH * nkv * 4);
  int32_t vbs[4] = {block, block / 2 + 3, 0, 1};
  for (int64_t r = 0; r < BH * nq; r++) {
    int perm[4] = {0, 1, 2, 3};
    for (int i = 3; i > 0; i--) {
      int j = (int)(rng_next() % (uint64_t)(i + 1)), x = perm[i];
      perm[i] = perm[j], perm[j] = x;
    }
    q2k_num[r] = r == 1 ? 0 : (int)(rng_next() % 5);
    for (int e = 0; e < width; e++)
      q2k_idx[r * width + e] = e < q2k_num[r] ? perm[e] : -1;
  }
  vsa_list_error lerr;
  if (vsa_invert_cpu(q2k_idx, q2k_num, (int)BH, nq, width, nkv, k2q_idx,
                     k2q_num, &lerr)) {
    check(0, vsa_last_error());
    return;
  }
  to_bshd(q, qs, 2, B, H, Sq, D);
  to_bshd(dO, dOs, 2, B, H, Sq, D);
  to_bshd(k, ks, 2, B, H, Skv, D);
  to_bshd(v, vs, 2, B, H, Skv, D);

  /* Reference forward in both layouts. */
  vsa_shape sh = {B, H, Sq, Skv, D, 1.0f / sqrtf((float)D), block, VSA_BHSD};
  vsa_shape ss = sh;
  ss.layout = VSA_BSHD;
  float *o = malloc(nqe * 4), *os = malloc(nqe * 4);
  float *lse = malloc(BH * Sq * 4), *lses = malloc(BH * Sq * 4);
  int rc = vsa_forward_ref_cpu(&sh, q, k, v, q2k_idx, q2k_num, width, vbs, o, lse) |
           vsa_forward_ref_cpu(&ss, qs, ks, vs, q2k_idx, q2k_num, width, vbs, os, lses);
  snprintf(what, sizeof what, "block %d: reference forward runs in both layouts", block);
  check(rc == 0, what);
  snprintf(what, sizeof what, "block %d: reference o (bshd) = o (bhsd) transposed", block);
  check(same_transposed(os, o, 4, B, H, Sq, D), what);
  snprintf(what, sizeof what, "block %d: reference lse identical ([B,H,Sq] both)", block);
  check(same_bytes(lse, lses, BH * Sq * 4), what);

  /* Backward: o rounded to bf16 as the Lua side passes it. */
  for (int64_t i = 0; i < nqe; i++) {
    uint32_t u;
    memcpy(&u, &o[i], 4);
    u += 0x7fff + ((u >> 16) & 1); /* round to nearest even */
    o16[i] = (uint16_t)(u >> 16);
  }
  to_bshd(o16, o16s, 2, B, H, Sq, D);
  float *dq = malloc(nqe * 4), *dk = malloc(nke * 4), *dv = malloc(nke * 4);
  float *dqs = malloc(nqe * 4), *dks = malloc(nke * 4), *dvs = malloc(nke * 4);
  float *delta = malloc(BH * Sq * 4), *deltas = malloc(BH * Sq * 4);
  rc = vsa_backward_ref_cpu(&sh, dO, q, k, v, o16, lse, k2q_idx, k2q_num, nq,
                            q2k_idx, q2k_num, width, vbs, dq, dk, dv, delta) |
       vsa_backward_ref_cpu(&ss, dOs, qs, ks, vs, o16s, lse, k2q_idx, k2q_num,
                            nq, q2k_idx, q2k_num, width, vbs, dqs, dks, dvs,
                            deltas);
  snprintf(what, sizeof what, "block %d: reference backward runs in both layouts", block);
  check(rc == 0, what);
  snprintf(what, sizeof what, "block %d: reference dq, dk, dv (bshd) = bhsd transposed", block);
  check(same_transposed(dqs, dq, 4, B, H, Sq, D) &&
            same_transposed(dks, dk, 4, B, H, Skv, D) &&
            same_transposed(dvs, dv, 4, B, H, Skv, D),
        what);
  snprintf(what, sizeof what, "block %d: reference Delta identical", block);
  check(same_bytes(delta, deltas, BH * Sq * 4), what);

  /* The oracle: whole, then a spot check with o/lse given. */
  double *qd = malloc(nqe * 8), *kd = malloc(nke * 8), *vd = malloc(nke * 8),
         *dOd = malloc(nqe * 8);
  double *qds = malloc(nqe * 8), *kds = malloc(nke * 8), *vds = malloc(nke * 8),
         *dOds = malloc(nqe * 8);
  for (int64_t i = 0; i < nqe; i++) {
    uint32_t u = (uint32_t)q[i] << 16, w = (uint32_t)dO[i] << 16;
    float f, g;
    memcpy(&f, &u, 4), memcpy(&g, &w, 4);
    qd[i] = f, dOd[i] = g;
  }
  for (int64_t i = 0; i < nke; i++) {
    uint32_t u = (uint32_t)k[i] << 16, w = (uint32_t)v[i] << 16;
    float f, g;
    memcpy(&f, &u, 4), memcpy(&g, &w, 4);
    kd[i] = f, vd[i] = g;
  }
  to_bshd(qd, qds, 8, B, H, Sq, D);
  to_bshd(dOd, dOds, 8, B, H, Sq, D);
  to_bshd(kd, kds, 8, B, H, Skv, D);
  to_bshd(vd, vds, 8, B, H, Skv, D);
  vsa_oracle_args a = {0};
  a.B = B, a.H = H, a.Sq = Sq, a.Skv = Skv, a.D = D, a.block = block;
  a.sm_scale = 1.0 / sqrt((double)D);
  a.q2k_idx = q2k_idx, a.q2k_num = q2k_num, a.q2k_width = width, a.vbs = vbs;
  a.n_bh = a.n_q_blocks = a.n_kv_blocks = -1;
  vsa_oracle_args as = a;
  a.q = qd, a.k = kd, a.v = vd, a.dO = dOd, a.layout = VSA_BHSD;
  as.q = qds, as.k = kds, as.v = vds, as.dO = dOds, as.layout = VSA_BSHD;
  double *Oo = calloc(nqe, 8), *Oos = calloc(nqe, 8);
  double *Ol = calloc(BH * Sq, 8), *Ols = calloc(BH * Sq, 8);
  double *Oq = calloc(nqe, 8), *Ok = calloc(nke, 8), *Ov = calloc(nke, 8);
  double *Oqs = calloc(nqe, 8), *Oks = calloc(nke, 8), *Ovs = calloc(nke, 8);
  rc = vsa_oracle(&a, Oo, Ol, Oq, Ok, Ov) | vsa_oracle(&as, Oos, Ols, Oqs, Oks, Ovs);
  snprintf(what, sizeof what, "block %d: oracle runs in both layouts", block);
  check(rc == 0, what);
  snprintf(what, sizeof what, "block %d: oracle o, dq, dk, dv (bshd) = bhsd transposed, lse equal", block);
  check(same_transposed(Oos, Oo, 8, B, H, Sq, D) &&
            same_transposed(Oqs, Oq, 8, B, H, Sq, D) &&
            same_transposed(Oks, Ok, 8, B, H, Skv, D) &&
            same_transposed(Ovs, Ov, 8, B, H, Skv, D) &&
            same_bytes(Ol, Ols, BH * Sq * 8),
        what);

  /* Spot check with the forward given: rows not produced stay NaN in both. */
  int32_t bh_list[2] = {1, (int32_t)BH - 1}, qb[1] = {nq - 1}, kb[2] = {0, nkv - 1};
  a.o_in = Oo, a.lse_in = Ol, as.o_in = Oos, as.lse_in = Ols;
  a.bh_list = as.bh_list = bh_list, a.n_bh = as.n_bh = 2;
  a.q_blocks = as.q_blocks = qb, a.n_q_blocks = as.n_q_blocks = 1;
  a.kv_blocks = as.kv_blocks = kb, a.n_kv_blocks = as.n_kv_blocks = 2;
  for (int64_t i = 0; i < nqe; i++) Oq[i] = Oqs[i] = NAN;
  for (int64_t i = 0; i < nke; i++) Ok[i] = Oks[i] = Ov[i] = Ovs[i] = NAN;
  rc = vsa_oracle(&a, NULL, NULL, Oq, Ok, Ov) |
       vsa_oracle(&as, NULL, NULL, Oqs, Oks, Ovs);
  snprintf(what, sizeof what, "block %d: oracle spot check (bshd) = bhsd transposed, NaN where not produced", block);
  check(rc == 0 && same_transposed(Oqs, Oq, 8, B, H, Sq, D) &&
            same_transposed(Oks, Ok, 8, B, H, Skv, D) &&
            same_transposed(Ovs, Ov, 8, B, H, Skv, D),
        what);

  /* An unknown layout is refused, naming the supported ones. */
  ss.layout = 2;
  rc = vsa_forward_ref_cpu(&ss, qs, ks, vs, q2k_idx, q2k_num, width, vbs, os, lses);
  snprintf(what, sizeof what, "block %d: reference refuses layout 2 (%s)", block,
           rc ? vsa_last_error() : "accepted");
  check(rc == -1 && strstr(vsa_last_error(), "supported: bhsd, bshd"), what);
  as.layout = 7;
  rc = vsa_oracle(&as, NULL, NULL, Oqs, Oks, Ovs);
  snprintf(what, sizeof what, "block %d: oracle refuses layout 7 (%s)", block,
           rc ? vsa_last_error() : "accepted");
  check(rc == -1 && strstr(vsa_last_error(), "supported: bhsd, bshd"), what);

  void *all[] = {q, dO, o16, k, v, qs, dOs, o16s, ks, vs, q2k_idx, q2k_num,
                 k2q_idx, k2q_num, o, os, lse, lses, dq, dk, dv, dqs, dks, dvs,
                 delta, deltas, qd, kd, vd, dOd, qds, kds, vds, dOds, Oo, Oos,
                 Ol, Ols, Oq, Ok, Ov, Oqs, Oks, Ovs};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) free(all[i]);
}

int
main(void)
{
  /* Fresh inputs each run; VSALAB_TEST_SEED=N replays one. */
  const char *seed = getenv("VSALAB_TEST_SEED");
  rng_state = seed ? strtoull(seed, NULL, 0) : (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
  printf("# seed %llu (replay: VSALAB_TEST_SEED=%llu)\n", (unsigned long long)rng_state,
         (unsigned long long)rng_state);
  test_helpers();
  for (int i = 0; i < vsa_n_block_sizes; i++) test_problem(vsa_block_table[i].block);
  printf("%d passed, %d failed\n", n_pass, n_fail);
  return n_fail ? 1 : 0;
}
