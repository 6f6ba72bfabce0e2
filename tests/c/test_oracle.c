/* test_oracle.c — the fp64 oracle on cases checkable by hand, by finite
 * differences and by dense attention; and the host comparison sums.
 *
 * Build and run (from the repository root):
 *   gcc -std=c11 -O2 -Wall -Wextra -I src/core -I src/storage tests/c/test_oracle.c \
 *     src/core/oracle.c src/core/slices.c src/core/block_size.c src/core/layout.c \
 *     src/core/compare_cpu.c src/core/list_check.c src/core/check.c \
 *     -I/usr/local/cuda/include \
 *     -L/usr/local/cuda/lib64 -lcudart_static -ldl -lpthread -lrt -lm \
 *     -o /tmp/test_oracle && /tmp/test_oracle
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* setenv under -std=c11 */
#endif
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bsa.h"
#include "check.h"

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
// Problem setup

static uint64_t rng_state = 12345;

static double
urand(void) /* uniform in [-1, 1) */
{
  rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
  return (double)(rng_state >> 11) / 9007199254740992.0 * 2 - 1;
}

typedef struct {
  vsa_oracle_args a;
  double *q, *k, *v, *dO;
  int32_t *idx, *num, *vbs;
  int nq, nkv;
  int64_t nqe, nke; /* elements of q-shaped and k-shaped arrays */
} problem;

static double *
dalloc(int64_t n, double fill)
{
  double *p = malloc((size_t)n * sizeof *p);
  for (int64_t t = 0; t < n; t++) p[t] = fill;
  return p;
}

/* The block size setup() gives a problem (tests at 128 set it). */
static int g_block = 64;

static void
setup(problem *p, int B, int H, int Sq, int Skv, int D, double sm_scale,
      int width)
{
  memset(p, 0, sizeof *p);
  p->nq = (Sq + g_block - 1) / g_block;
  p->nkv = (Skv + g_block - 1) / g_block;
  p->nqe = (int64_t)B * H * Sq * D;
  p->nke = (int64_t)B * H * Skv * D;
  p->q = dalloc(p->nqe, 0);
  p->k = dalloc(p->nke, 0);
  p->v = dalloc(p->nke, 0);
  p->dO = dalloc(p->nqe, 0);
  for (int64_t t = 0; t < p->nqe; t++) p->q[t] = urand();
  for (int64_t t = 0; t < p->nke; t++) p->k[t] = urand();
  for (int64_t t = 0; t < p->nke; t++) p->v[t] = urand();
  for (int64_t t = 0; t < p->nqe; t++) p->dO[t] = urand();
  p->idx = malloc((size_t)B * H * p->nq * (width ? width : 1) * 4);
  p->num = calloc((size_t)B * H * p->nq, 4);
  p->vbs = malloc((size_t)p->nkv * 4);
  for (int j = 0; j < p->nkv; j++) p->vbs[j] = g_block;
  for (int64_t t = 0; t < (int64_t)B * H * p->nq * width; t++) p->idx[t] = -1;
  vsa_oracle_args *a = &p->a;
  a->B = B;
  a->H = H;
  a->Sq = Sq;
  a->Skv = Skv;
  a->D = D;
  a->block = g_block;
  a->sm_scale = sm_scale;
  a->q = p->q;
  a->k = p->k;
  a->v = p->v;
  a->dO = p->dO;
  a->q2k_idx = p->idx;
  a->q2k_num = p->num;
  a->q2k_width = width;
  a->vbs = p->vbs;
  a->n_bh = a->n_q_blocks = a->n_kv_blocks = -1;
}

static void
teardown(problem *p)
{
  free(p->q);
  free(p->k);
  free(p->v);
  free(p->dO);
  free(p->idx);
  free(p->num);
  free(p->vbs);
}

/* Random distinct lists, counts in [0, width], a few forced to 0. */
static void
random_lists(problem *p)
{
  int W = p->a.q2k_width;
  int64_t rows = (int64_t)p->a.B * p->a.H * p->nq;
  for (int64_t r = 0; r < rows; r++) {
    int maxc = W < p->nkv ? W : p->nkv;
    int c = (int)((urand() + 1) * 0.5 * (maxc + 1));
    if (c > maxc) c = maxc;
    if (r % 5 == 2) c = 0;
    int n = 0;
    while (n < c) {
      int j = (int)((urand() + 1) * 0.5 * p->nkv) % p->nkv, dup = 0;
      for (int t = 0; t < n; t++) dup |= p->idx[r * W + t] == j;
      if (!dup) p->idx[r * W + n++] = j;
    }
    p->num[r] = c;
  }
}

static double
max_abs_diff(const double *x, const double *y, int64_t n)
{
  double m = 0;
  for (int64_t t = 0; t < n; t++) m = fmax(m, fabs(x[t] - y[t]));
  return m;
}

static int
all_equal(const double *x, double v, int64_t n)
{
  for (int64_t t = 0; t < n; t++)
    if (x[t] != v) return 0;
  return 1;
}

// ----------------------------------------------------------------------------
// Hand-checkable cases

/* One q block, one kv block, vbs = 1: P = 1 on key 0, so o = v row 0,
 * dS = dO·v0 − dO·o = 0, dq = dk = 0, dv row 0 = Σ dO rows. */
static void
test_single_key(void)
{
  problem p;
  setup(&p, 1, 1, 64, 64, 4, 0.5, 1);
  p.vbs[0] = 1;
  p.idx[0] = 0;
  p.num[0] = 1;
  double *o = dalloc(p.nqe, NAN), *lse = dalloc(64, NAN);
  double *dq = dalloc(p.nqe, NAN), *dk = dalloc(p.nke, NAN),
         *dv = dalloc(p.nke, NAN);
  int rc = vsa_oracle(&p.a, o, lse, dq, dk, dv);
  int o_ok = 1, lse_ok = 1;
  for (int r = 0; r < 64; r++) {
    o_ok &= !memcmp(o + r * 4, p.v, 4 * sizeof *o);
    double x = 0;
    for (int d = 0; d < 4; d++) x += p.q[r * 4 + d] * p.k[d];
    lse_ok &= fabs(lse[r] - x * 0.5 * VSA_LOG2E) < 1e-15;
  }
  CHECK(rc == 0 && o_ok, "vbs=1: o rows equal v row 0 exactly");
  CHECK(lse_ok, "vbs=1: lse = q·k0·sm_scale·log2 e");
  double sum[4] = {0};
  for (int r = 0; r < 64; r++)
    for (int d = 0; d < 4; d++) sum[d] += p.dO[r * 4 + d];
  CHECK(max_abs_diff(dv, sum, 4) < 1e-14 && all_equal(dv + 4, 0, 63 * 4),
        "vbs=1: dv row 0 = sum of dO rows, other rows exactly 0");
  CHECK(all_equal(dq, 0, p.nqe) && all_equal(dk, 0, p.nke),
        "vbs=1: dq and dk exactly 0");
  free(o);
  free(lse);
  free(dq);
  free(dk);
  free(dv);
  teardown(&p);
}

/* D = 1, two valid keys: q = 1, k = (0, ln 3), v = (1, 5), dO = 1,
 * sm_scale = 1: P = (1/4, 3/4), o = 4, lse = 2, dS = (-3/4, 3/4),
 * dq = 3/4 ln 3, dk = 64·dS, dv = 64·P. */
static void
test_two_keys(void)
{
  problem p;
  setup(&p, 1, 1, 64, 64, 1, 1.0, 2);
  for (int r = 0; r < 64; r++) {
    p.q[r] = 1;
    p.dO[r] = 1;
    p.k[r] = 7; /* keys past vbs: must not matter */
    p.v[r] = -9;
  }
  p.k[0] = 0;
  p.k[1] = log(3.0);
  p.v[0] = 1;
  p.v[1] = 5;
  p.vbs[0] = 2;
  p.idx[0] = 0;
  p.idx[1] = 0x7fffffff; /* past the count */
  p.num[0] = 1;
  double *o = dalloc(64, NAN), *lse = dalloc(64, NAN), *dq = dalloc(64, NAN),
         *dk = dalloc(64, NAN), *dv = dalloc(64, NAN);
  int rc = vsa_oracle(&p.a, o, lse, dq, dk, dv);
  double e = 0;
  for (int r = 0; r < 64; r++) {
    e = fmax(e, fabs(o[r] - 4));
    e = fmax(e, fabs(lse[r] - 2));
    e = fmax(e, fabs(dq[r] - 0.75 * log(3.0)));
  }
  e = fmax(e, fabs(dk[0] + 48));
  e = fmax(e, fabs(dk[1] - 48));
  e = fmax(e, fabs(dv[0] - 16));
  e = fmax(e, fabs(dv[1] - 48));
  CHECK(rc == 0 && e < 1e-12 && all_equal(dk + 2, 0, 62) &&
            all_equal(dv + 2, 0, 62),
        "two keys by hand: o=4 lse=2 dq=3/4 ln3 dk=(-48,48) dv=(16,48), "
        "slots past vbs 0 (max err %.2e)", e);
  free(o);
  free(lse);
  free(dq);
  free(dk);
  free(dv);
  teardown(&p);
}

// ----------------------------------------------------------------------------
// Dense attention and finite differences

/* Every block selected, vbs = 64: plain softmax attention in natural log. */
static void
test_dense(void)
{
  problem p;
  int S = 192, D = 5;
  setup(&p, 1, 2, S, S, D, 0.3, 3);
  for (int r = 0; r < 2 * 3; r++) {
    p.num[r] = 3;
    for (int t = 0; t < 3; t++) p.idx[r * 3 + t] = (t + r) % 3;
  }
  double *o = dalloc(p.nqe, NAN), *lse = dalloc(2 * S, NAN);
  int rc = vsa_oracle(&p.a, o, lse, NULL, NULL, NULL);
  double err = 0, lerr = 0;
  double *s = malloc(S * sizeof *s);
  for (int bh = 0; bh < 2; bh++)
    for (int r = 0; r < S; r++) {
      const double *q = p.q + ((int64_t)bh * S + r) * D;
      double m = -INFINITY, z = 0;
      for (int c = 0; c < S; c++) {
        s[c] = 0;
        for (int d = 0; d < D; d++)
          s[c] += q[d] * p.k[((int64_t)bh * S + c) * D + d];
        s[c] *= 0.3;
        m = fmax(m, s[c]);
      }
      for (int c = 0; c < S; c++) z += exp(s[c] - m);
      for (int d = 0; d < D; d++) {
        double acc = 0;
        for (int c = 0; c < S; c++)
          acc += exp(s[c] - m) / z * p.v[((int64_t)bh * S + c) * D + d];
        err = fmax(err, fabs(acc - o[((int64_t)bh * S + r) * D + d]));
      }
      lerr = fmax(lerr, fabs((m + log(z)) / log(2.0) - lse[bh * S + r]));
    }
  CHECK(rc == 0 && err < 1e-13 && lerr < 1e-13,
        "all blocks selected = dense softmax attention (o err %.1e, lse err "
        "%.1e)", err, lerr);
  free(s);
  free(o);
  free(lse);
  teardown(&p);
}

/* L = Σ dO∘o as a function of one input element. */
static double
loss(problem *p, double *o)
{
  vsa_oracle(&p->a, o, NULL, NULL, NULL, NULL);
  double L = 0;
  for (int64_t t = 0; t < p->nqe; t++) L += p->dO[t] * o[t];
  return L;
}

/* At block size blk (64 or 128). */
static void
test_finite_differences(int blk)
{
  problem p;
  g_block = blk;
  /* Sq != Skv, partial vbs (at 128, one past the first 64 tokens), an
   * empty kv block, empty rows. */
  setup(&p, 2, 2, 5 * blk, 7 * blk, 6, 0.7, 5);
  g_block = 64;
  random_lists(&p);
  int32_t vbs[7] = {blk, 10, 0, blk, blk == 64 ? 33 : 97, 1, blk};
  memcpy(p.vbs, vbs, sizeof vbs);
  double *o = dalloc(p.nqe, 0);
  double *dq = dalloc(p.nqe, NAN), *dk = dalloc(p.nke, NAN),
         *dv = dalloc(p.nke, NAN);
  int rc = vsa_oracle(&p.a, NULL, NULL, dq, dk, dv);

  /* Elements spread over (b, h), blocks, rows and features. */
  struct { double *arr, *grad; int64_t n; const char *name; } ins[] = {
      {p.q, dq, p.nqe, "q"}, {p.k, dk, p.nke, "k"}, {p.v, dv, p.nke, "v"}};
  double worst = 0;
  int checked = 0;
  for (int w = 0; w < 3; w++)
    for (int s = 0; s < 40; s++) {
      int64_t t = (int64_t)((urand() + 1) * 0.5 * ins[w].n) % ins[w].n;
      double keep = ins[w].arr[t], h = 1e-5;
      ins[w].arr[t] = keep + h;
      double Lp = loss(&p, o);
      ins[w].arr[t] = keep - h;
      double Lm = loss(&p, o);
      ins[w].arr[t] = keep;
      double fd = (Lp - Lm) / (2 * h), g = ins[w].grad[t];
      double rel = fabs(fd - g) / fmax(1e-3, fabs(g));
      worst = fmax(worst, rel);
      checked++;
    }
  CHECK(rc == 0 && worst < 1e-6,
        "block %d: dq, dk, dv match central differences of sum(dO*o) at %d elements "
        "(worst rel err %.2e)", blk, checked, worst);

  /* Exact zeros: kv slots at or past vbs, the vbs = 0 block. */
  int zeros = 1;
  for (int bh = 0; bh < 4; bh++)
    for (int c = 0; c < 7 * blk; c++)
      if (c % blk >= vbs[c / blk])
        for (int d = 0; d < 6; d++) {
          int64_t t = ((int64_t)bh * 7 * blk + c) * 6 + d;
          zeros &= dk[t] == 0 && dv[t] == 0;
        }
  CHECK(zeros, "block %d: dk/dv exactly 0 at kv slots >= vbs and in the vbs = 0 block", blk);
  int empty_ok = 1, nempty = 0;
  for (int r = 0; r < 4 * 5; r++)
    if (p.num[r] == 0) {
      nempty++;
      empty_ok &= all_equal(dq + (int64_t)r * blk * 6, 0, blk * 6);
    }
  CHECK(nempty > 0 && empty_ok, "block %d: dq exactly 0 on %d q blocks with count 0",
        blk, nempty);

  /* Garbage past the counts changes nothing. */
  double *dq2 = dalloc(p.nqe, NAN), *dk2 = dalloc(p.nke, NAN),
         *dv2 = dalloc(p.nke, NAN);
  for (int r = 0; r < 4 * 5; r++)
    for (int t = p.num[r]; t < 5; t++)
      p.idx[r * 5 + t] = t % 2 ? 0x7fffffff : p.idx[r * 5];
  rc = vsa_oracle(&p.a, NULL, NULL, dq2, dk2, dv2);
  CHECK(rc == 0 && !memcmp(dq, dq2, p.nqe * 8) &&
            !memcmp(dk, dk2, p.nke * 8) && !memcmp(dv, dv2, p.nke * 8),
        "block %d: list tails (INT32_MAX, repeats) are never read", blk);
  free(dq2);
  free(dk2);
  free(dv2);
  free(o);
  free(dq);
  free(dk);
  free(dv);
  teardown(&p);
}

/* A block size off the list, or a vbs entry past the block, is an error
 * naming what is supported, before any output is written. */
static void
test_block_errors(void)
{
  problem p;
  setup(&p, 1, 1, 256, 256, 4, 0.5, 2);
  double *o = dalloc(p.nqe, 7);
  p.a.block = 96;
  int rc = vsa_oracle(&p.a, o, NULL, NULL, NULL, NULL);
  CHECK(rc == -1 && strstr(vsa_last_error(), "block size 96") &&
            strstr(vsa_last_error(), "64, 128") && o[0] == 7,
        "block 96 is refused naming the supported sizes: %s", vsa_last_error());
  p.a.block = 128;
  p.vbs[1] = 129;
  rc = vsa_oracle(&p.a, o, NULL, NULL, NULL, NULL);
  CHECK(rc == -1 && strstr(vsa_last_error(), "[0, 128]"),
        "block 128: vbs 129 is out of range: %s", vsa_last_error());
  p.vbs[1] = 128;
  rc = vsa_oracle(&p.a, o, NULL, NULL, NULL, NULL);
  CHECK(rc == 0, "block 128: 256 tokens are 2 blocks, vbs 128 is valid");
  free(o);
  teardown(&p);
}

// ----------------------------------------------------------------------------
// Given forward, subsets, empty rows

static void
test_given_forward_and_subsets(void)
{
  problem p;
  setup(&p, 2, 2, 4 * 64, 6 * 64, 4, 0.4, 4);
  random_lists(&p);
  p.vbs[3] = 20;
  double *o = dalloc(p.nqe, NAN), *lse = dalloc(4 * 4 * 64, NAN);
  double *dq = dalloc(p.nqe, NAN), *dk = dalloc(p.nke, NAN),
         *dv = dalloc(p.nke, NAN);
  int rc = vsa_oracle(&p.a, o, lse, dq, dk, dv);

  /* Empty rows: o = 0, lse = VSA_LSE_EMPTY. */
  int empty_ok = 1;
  for (int r = 0; r < 4 * 4; r++)
    if (p.num[r] == 0)
      for (int t = 0; t < 64; t++) {
        empty_ok &= lse[r * 64 + t] == VSA_LSE_EMPTY;
        empty_ok &= all_equal(o + ((int64_t)r * 64 + t) * 4, 0, 4);
      }
  CHECK(rc == 0 && empty_ok, "rows with no valid key: o = 0, lse = EMPTY");

  /* The oracle's own forward handed back gives identical gradients. */
  p.a.o_in = o;
  p.a.lse_in = lse;
  double *dq2 = dalloc(p.nqe, NAN), *dk2 = dalloc(p.nke, NAN),
         *dv2 = dalloc(p.nke, NAN);
  rc = vsa_oracle(&p.a, NULL, NULL, dq2, dk2, dv2);
  CHECK(rc == 0 && !memcmp(dq, dq2, p.nqe * 8) &&
            !memcmp(dk, dk2, p.nke * 8) && !memcmp(dv, dv2, p.nke * 8),
        "o_in/lse_in = the oracle's own: dq, dk, dv bitwise identical");

  /* Empty rows' lse may be anything. */
  double *lse_odd = malloc(4 * 4 * 64 * sizeof *lse_odd);
  const double odd[3] = {INFINITY, -INFINITY, 0};
  int odd_ok = 1;
  for (int v = 0; v < 3; v++) {
    memcpy(lse_odd, lse, 4 * 4 * 64 * sizeof *lse_odd);
    for (int r = 0; r < 4 * 4; r++)
      if (p.num[r] == 0)
        for (int t = 0; t < 64; t++) lse_odd[r * 64 + t] = odd[v];
    p.a.lse_in = lse_odd;
    rc = vsa_oracle(&p.a, NULL, NULL, dq2, dk2, dv2);
    odd_ok &= rc == 0 && !memcmp(dq, dq2, p.nqe * 8) &&
              !memcmp(dk, dk2, p.nke * 8) && !memcmp(dv, dv2, p.nke * 8);
  }
  p.a.lse_in = lse;
  CHECK(odd_ok, "empty rows' lse +inf / -inf / 0: same gradients");

  /* Subsets, with and without the given forward; sentinel elsewhere. */
  int32_t bhs[1] = {3}, qb[2] = {1, 3}, kb[2] = {0, 4};
  for (int given = 0; given < 2; given++) {
    p.a.o_in = given ? o : NULL;
    p.a.lse_in = given ? lse : NULL;
    p.a.bh_list = bhs;
    p.a.n_bh = 1;
    p.a.q_blocks = qb;
    p.a.n_q_blocks = 2;
    p.a.kv_blocks = kb;
    p.a.n_kv_blocks = 2;
    double *o3 = dalloc(p.nqe, 777), *l3 = dalloc(4 * 4 * 64, 777);
    double *dq3 = dalloc(p.nqe, 777), *dk3 = dalloc(p.nke, 777),
           *dv3 = dalloc(p.nke, 777);
    rc = vsa_oracle(&p.a, o3, l3, dq3, dk3, dv3);
    double err = 0;
    int untouched = 1;
    for (int64_t r = 0; r < 4 * 4 * 64; r++) {
      int bh = (int)(r / 256), blk = (int)(r % 256 / 64);
      int on = bh == 3 && (blk == 1 || blk == 3);
      for (int d = 0; d < 4; d++) {
        int64_t t = r * 4 + d;
        if (on) err = fmax(err, fabs(dq3[t] - dq[t]));
        else untouched &= dq3[t] == 777;
        if (on && !given) err = fmax(err, fabs(o3[t] - o[t]));
        else untouched &= o3[t] == 777;
      }
      if (on && !given) err = fmax(err, fabs(l3[r] - lse[r]));
      else untouched &= l3[r] == 777;
    }
    for (int64_t r = 0; r < 4 * 6 * 64; r++) {
      int bh = (int)(r / 384), blk = (int)(r % 384 / 64);
      int on = bh == 3 && (blk == 0 || blk == 4);
      for (int d = 0; d < 4; d++) {
        int64_t t = r * 4 + d;
        if (on) {
          err = fmax(err, fabs(dk3[t] - dk[t]));
          err = fmax(err, fabs(dv3[t] - dv[t]));
        } else {
          untouched &= dk3[t] == 777 && dv3[t] == 777;
        }
      }
    }
    CHECK(rc == 0 && err < 1e-13 && untouched,
          "subset bh {3}, q {1,3}, kv {0,4}%s: rows match the full run (max "
          "err %.1e), other rows untouched",
          given ? " with o_in/lse_in" : "", err);
    free(o3);
    free(l3);
    free(dq3);
    free(dk3);
    free(dv3);
  }
  p.a.bh_list = NULL;
  p.a.n_bh = p.a.n_q_blocks = p.a.n_kv_blocks = -1;

  /* Argument and list errors. */
  p.a.o_in = o;
  p.a.lse_in = NULL;
  CHECK(vsa_oracle(&p.a, NULL, NULL, dq2, dk2, dv2) == -1 &&
            strstr(vsa_last_error(), "lse_in"),
        "o_in without lse_in rejected: \"%s\"", vsa_last_error());
  p.a.o_in = NULL;
  int saved = p.num[9];
  p.num[9] = 5;
  CHECK(vsa_oracle(&p.a, NULL, NULL, dq2, dk2, dv2) == -1 &&
            strstr(vsa_last_error(),
                   "q2k_num: count 5 out of range [0, 4] at (b=1, h=0, "
                   "q block=1)"),
        "bad count rejected: \"%s\"", vsa_last_error());
  p.num[9] = saved;
  int32_t saved_idx = p.idx[9 * 4];
  int saved_num = p.num[9];
  p.num[9] = 1;
  p.idx[9 * 4] = 6;
  CHECK(vsa_oracle(&p.a, NULL, NULL, dq2, dk2, dv2) == -1 &&
            strstr(vsa_last_error(),
                   "q2k_idx: index 6 out of range [0, 6) at (b=1, h=0, "
                   "q block=1)"),
        "bad index rejected: \"%s\"", vsa_last_error());
  p.idx[9 * 4] = saved_idx;
  p.num[9] = saved_num;
  int32_t badq[1] = {4};
  p.a.q_blocks = badq;
  p.a.n_q_blocks = 1;
  CHECK(vsa_oracle(&p.a, NULL, NULL, dq2, dk2, dv2) == -1 &&
            strstr(vsa_last_error(), "q_blocks"),
        "q block out of range rejected: \"%s\"", vsa_last_error());

  free(lse_odd);
  free(o);
  free(lse);
  free(dq);
  free(dk);
  free(dv);
  free(dq2);
  free(dk2);
  free(dv2);
  teardown(&p);
}

// ----------------------------------------------------------------------------
// The comparison sums used against the oracle

static void
test_compare_cpu(void)
{
  float x[5] = {1, 2, NAN, 4, -0.5f};
  double r[5] = {1, 3, 5, INFINITY, -0.25};
  vsa_compare_sums s;
  memset(&s, 0, sizeof s);
  vsa_compare_cpu(x, VSA_F32, r, VSA_F64, 5, &s);
  CHECK(s.diff2 == 1.0625 && s.ref2 == 10.0625 && s.x2 == 5.25 &&
            s.max_abs == 1 && s.nonfinite_x == 1 && s.nonfinite_ref == 1 &&
            s.n == 5,
        "compare_cpu: sums skip non-finite pairs, count each side");
  /* bf16 1.5 = 0x3FC0; accumulates into the same sums. */
  uint16_t b[2] = {0x3FC0, 0x7FC0};
  float f[2] = {1.0f, 0.0f};
  vsa_compare_cpu(b, VSA_BF16, f, VSA_F32, 2, &s);
  CHECK(s.diff2 == 1.3125 && s.n == 7 && s.nonfinite_x == 2 &&
            s.max_abs == 1,
        "compare_cpu: bf16 input, sums accumulate across calls");
  vsa_compare_sums t;
  memset(&t, 0, sizeof t);
  int32_t ints[2] = {1, 2};
  vsa_compare_cpu(ints, VSA_I32, f, VSA_F32, 2, &t);
  CHECK(t.nonfinite_x == 2 && t.diff2 == 0,
        "compare_cpu: a non-float dtype counts as non-finite (fails loudly)");
}

/* The oracle runs on host threads (slices.h): its outputs must be bitwise
 * the same with 1 thread and with several, at both block sizes, in BSHD
 * with ragged and empty kv blocks, for a full run and for spot-check
 * subsets with o and lse given. */
static void
test_thread_count(int block)
{
  g_block = block;
  problem p;
  setup(&p, 2, 3, 5 * block - 9, 6 * block - 21, 32, 0.17, 4);
  random_lists(&p);
  p.vbs[1] = 0;
  p.vbs[3] = block / 3;
  p.a.layout = VSA_BSHD;
  double *o = dalloc(p.nqe, 0), *lse = dalloc((int64_t)2 * 3 * p.a.Sq, 0);
  double *out[2][5];
  int32_t qb[2] = {0, 3}, kb[2] = {1, 5};
  int same = 1, rc = 0;
  for (int run = 0; run < 2; run++) { /* run 0: all outputs; 1: subsets, o and lse given */
    for (int t = 0; t < 2; t++) {
      setenv("VSALAB_HOST_THREADS", t ? "7" : "1", 1);
      for (int x = 0; x < 5; x++)
        out[t][x] = dalloc(x == 4 ? (int64_t)2 * 3 * p.a.Sq : x == 0 || x == 3 ? p.nqe : p.nke, NAN);
      vsa_oracle_args a = p.a;
      if (run) {
        a.o_in = o;
        a.lse_in = lse;
        a.q_blocks = qb;
        a.n_q_blocks = 2;
        a.kv_blocks = kb;
        a.n_kv_blocks = 2;
      }
      rc |= vsa_oracle(&a, run ? NULL : out[t][3], run ? NULL : out[t][4], out[t][0], out[t][1],
                       out[t][2]);
    }
    if (!run) { /* the forward that run 1 is given */
      memcpy(o, out[0][3], (size_t)p.nqe * sizeof *o);
      memcpy(lse, out[0][4], (size_t)2 * 3 * p.a.Sq * sizeof *lse);
    }
    for (int x = 0; x < 5; x++) {
      int64_t n = x == 4 ? (int64_t)2 * 3 * p.a.Sq : x == 0 || x == 3 ? p.nqe : p.nke;
      same &= memcmp(out[0][x], out[1][x], (size_t)n * sizeof(double)) == 0;
      free(out[0][x]);
      free(out[1][x]);
    }
  }
  unsetenv("VSALAB_HOST_THREADS");
  CHECK(rc == 0 && same, "block %d: 1 and 7 host threads give bitwise the same dq, dk, dv, o, lse"
        " (all rows; subsets with o, lse given)", block);
  free(o);
  free(lse);
  teardown(&p);
  g_block = 64;
}

int
main(void)
{
  test_compare_cpu();
  test_single_key();
  test_two_keys();
  test_dense();
  test_finite_differences(64);
  test_finite_differences(128);
  test_block_errors();
  test_given_forward_and_subsets();
  test_thread_count(64);
  test_thread_count(128);
  printf("%d passed, %d failed\n", passed, failed);
  return failed != 0;
}
