/* test_ref_cpu.c — checks the host reference forward/backward
 * (src/core/bsa_ref_cpu.c) against a brute-force fp64 attention written here:
 * a dense per-(b, h) mask built from the q2k lists and vbs, then a plain
 * per-row softmax over the valid keys. Shapes are small and ragged: Sq != Skv,
 * B, H > 1, a count-0 q block, a q block whose only kv block is empty
 * (vbs = 0), a head with no selections at all, a kv block nothing selects,
 * partial blocks (vbs = 32, 17), and list tails holding garbage.
 *
 * Checks: rel L2 < 1e-4 for o, dq, dk, dv, Delta; |lse error| < 1e-4;
 * exact zeros (dk/dv of unselected blocks and invalid slots, dq/o of rows
 * without a valid key, lse = VSA_LSE_EMPTY there); no NaN/Inf although every
 * output is NaN-filled first; bitwise-identical results when list tails,
 * padded K/V slots or the lse of empty rows hold other values; bad lists
 * rejected with an error; a point timeout raised inside a one-head backward
 * stops it at the next kv block.
 *
 * Build and run:
 *   gcc -std=c11 -O2 -I src/core -I src/storage tests/c/test_ref_cpu.c src/core/bsa_ref_cpu.c \
 *     src/core/check.c -I/usr/local/cuda/include -lm -L/usr/local/cuda/lib64 \
 *     -lcudart_static -ldl -lpthread -lrt -o /tmp/test_ref && /tmp/test_ref
 */
#include "bsa.h"
#include "check.h"

#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// ---------------------------------------------------------------------------
// Check bookkeeping

static int n_pass, n_fail;

static void
check(int ok, const char *cfg, const char *what, const char *detail)
{
  printf("%s %-6s %-44s %s\n", ok ? "PASS" : "FAIL", cfg, what, detail);
  if (ok) n_pass++;
  else n_fail++;
}

/* rel L2 of x against ref (‖x‖ when ref is all zero) over n values;
 * *nonfinite counts NaN/Inf in x. */
static double
rel_l2(const float *x, const double *ref, int64_t n, int64_t *nonfinite)
{
  double d2 = 0, r2 = 0, x2 = 0;
  *nonfinite = 0;
  for (int64_t i = 0; i < n; i++) {
    if (!isfinite(x[i])) {
      (*nonfinite)++;
      continue;
    }
    double d = (double)x[i] - ref[i];
    d2 += d * d;
    r2 += ref[i] * ref[i];
    x2 += (double)x[i] * x[i];
  }
  return r2 > 0 ? sqrt(d2 / r2) : sqrt(x2);
}

static void
check_rel(const char *cfg, const char *name, const float *x, const double *ref,
          int64_t n, double tol)
{
  int64_t bad;
  double e = rel_l2(x, ref, n, &bad);
  char what[64], detail[96];
  snprintf(what, sizeof what, "%s rel L2 vs fp64", name);
  snprintf(detail, sizeof detail, "%.3e (< %.0e), nonfinite %lld", e, tol,
           (long long)bad);
  check(bad == 0 && e < tol, cfg, what, detail);
}

// ---------------------------------------------------------------------------
// Data: deterministic PRNG, bf16 rounding

#include "test_rng.h"

static double
rng_uniform(void)
{ /* [0, 1) */
  return (double)(rng_next() >> 11) * (1.0 / 9007199254740992.0);
}

static int
rng_int(int n)
{ /* [0, n) */
  return (int)(rng_next() % (uint64_t)n);
}

static uint16_t
f32_to_bf16(float f)
{ /* round to nearest even; inputs here are finite */
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}

static double
bf16_to_f64(uint16_t h)
{
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

static void
fill_bf16(uint16_t *x, int64_t n, double amp)
{
  for (int64_t i = 0; i < n; i++)
    x[i] = f32_to_bf16((float)((2 * rng_uniform() - 1) * amp));
}

static void
fill_nan(float *x, int64_t n)
{
  for (int64_t i = 0; i < n; i++) x[i] = NAN;
}

/* Values list tails may hold: never to be read. */
static int32_t
garbage(void)
{
  static const int32_t g[] = {-1, INT32_MAX, INT32_MIN, 0, 1, 123456789};
  return g[rng_int((int)(sizeof g / sizeof g[0]))];
}

// ---------------------------------------------------------------------------
// A test configuration and its lists

typedef struct {
  const char *name;
  int B, H, Sq, Skv, D;
  uint64_t seed;
  const int32_t *vbs;
  int special; /* 1: plant the empty rows / head / unselected block */
  int block;   /* tokens per block: 64 or 128 */
} config;

typedef struct {
  vsa_shape s;
  int nq, nkv, qw, kw; /* list widths: q2k qw >= nkv, k2q kw >= nq */
  int64_t nqe, nke;    /* elements of q-side and kv-side tensors */
  uint16_t *q, *k, *v, *dO;
  int32_t *q2k_idx, *q2k_num, *k2q_idx, *k2q_num, vbs[64];
} problem;

/* Random q2k lists (distinct blocks, random order, ragged counts) with the
 * special rows planted when cfg->special: in (b0, h0) q block 1 has count 0,
 * q block 2 selects only kv block 1 (vbs = 0) and kv block 3 is never
 * selected; in the last (b, h) every count is 0. */
static void
build_q2k(const config *cfg, problem *p)
{
  const int nq = p->nq, nkv = p->nkv, BH = cfg->B * cfg->H;
  for (int64_t x = 0; x < (int64_t)BH * nq * p->qw; x++)
    p->q2k_idx[x] = garbage();
  for (int bh = 0; bh < BH; bh++)
    for (int i = 0; i < nq; i++) {
      int32_t *row = p->q2k_idx + ((int64_t)bh * nq + i) * p->qw;
      int perm[64], n = 0;
      for (int j = 0; j < nkv; j++)
        if (!(cfg->special && bh == 0 && j == 3)) perm[n++] = j;
      for (int a = n - 1; a > 0; a--) { /* Fisher-Yates */
        int b = rng_int(a + 1), t = perm[a];
        perm[a] = perm[b];
        perm[b] = t;
      }
      int count = 1 + rng_int(n); /* 1..n */
      if (cfg->special && bh == 0 && i == 1) count = 0;
      if (cfg->special && bh == 0 && i == 2) {
        perm[0] = 1;
        count = 1;
      }
      if (cfg->special && bh == BH - 1) count = 0;
      if (!cfg->special && i == nq - 1 && bh == 0) count = 0;
      for (int e = 0; e < count; e++) row[e] = perm[e];
      p->q2k_num[(int64_t)bh * nq + i] = count;
    }
}

/* k2q = inverse of q2k, ascending q order, tails garbage. */
static void
build_k2q(const config *cfg, problem *p)
{
  const int nq = p->nq, nkv = p->nkv, BH = cfg->B * cfg->H;
  for (int64_t x = 0; x < (int64_t)BH * nkv * p->kw; x++)
    p->k2q_idx[x] = garbage();
  for (int bh = 0; bh < BH; bh++)
    for (int j = 0; j < nkv; j++) {
      int32_t *row = p->k2q_idx + ((int64_t)bh * nkv + j) * p->kw;
      int n = 0;
      for (int i = 0; i < nq; i++) {
        const int32_t *ql = p->q2k_idx + ((int64_t)bh * nq + i) * p->qw;
        for (int e = 0; e < p->q2k_num[(int64_t)bh * nq + i]; e++)
          if (ql[e] == j) row[n++] = i;
      }
      p->k2q_num[(int64_t)bh * nkv + j] = n;
    }
}

/* Refill the list tails (past each count) with fresh garbage. */
static void
refill_tails(int32_t *idx, const int32_t *num, int64_t rows, int width)
{
  for (int64_t r = 0; r < rows; r++)
    for (int e = num[r]; e < width; e++) idx[r * width + e] = garbage();
}

// ---------------------------------------------------------------------------
// fp64 brute force

typedef struct {
  double *o, *lse, *dq, *dk, *dv, *delta; /* lse = NAN marks an empty row */
  unsigned char *row_empty;               /* [B*H*Sq] */
  unsigned char *kv_zero;                 /* [B*H*Skv]: no valid use */
} oracle_out;

/* Forward: o and base-2 lse per row over the dense mask. */
static void
oracle_forward(const problem *p, const unsigned char *mask, int64_t bh,
               oracle_out *out)
{
  const int D = p->s.D, Sq = p->s.Sq, Skv = p->s.Skv;
  const double c2 = p->s.sm_scale * VSA_LOG2E;
  double *x = malloc(sizeof(double) * Skv);
  for (int r = 0; r < Sq; r++) {
    const int64_t gr = bh * Sq + r;
    const uint16_t *qr = p->q + gr * D;
    double m = -INFINITY;
    for (int c = 0; c < Skv; c++) {
      if (!mask[(int64_t)r * Skv + c]) continue;
      const uint16_t *kc = p->k + (bh * Skv + c) * D;
      double s = 0;
      for (int d = 0; d < D; d++) s += bf16_to_f64(qr[d]) * bf16_to_f64(kc[d]);
      x[c] = s * c2;
      if (x[c] > m) m = x[c];
    }
    double *orow = out->o + gr * D;
    for (int d = 0; d < D; d++) orow[d] = 0;
    out->row_empty[gr] = m == -INFINITY;
    if (m == -INFINITY) {
      out->lse[gr] = NAN;
      continue;
    }
    double l = 0;
    for (int c = 0; c < Skv; c++) {
      if (!mask[(int64_t)r * Skv + c]) continue;
      double pr = exp2(x[c] - m);
      l += pr;
      const uint16_t *vc = p->v + (bh * Skv + c) * D;
      for (int d = 0; d < D; d++) orow[d] += pr * bf16_to_f64(vc[d]);
    }
    for (int d = 0; d < D; d++) orow[d] /= l;
    out->lse[gr] = m + log2(l);
  }
  free(x);
}

/* Backward given o (the bf16 o the reference is fed) and the fp64 lse. */
static void
oracle_backward(const problem *p, const unsigned char *mask, int64_t bh,
                const uint16_t *o_bf, oracle_out *out)
{
  const int D = p->s.D, Sq = p->s.Sq, Skv = p->s.Skv;
  const double sc = p->s.sm_scale, c2 = sc * VSA_LOG2E;
  for (int r = 0; r < Sq; r++) {
    const int64_t gr = bh * Sq + r;
    double dl = 0;
    for (int d = 0; d < D; d++)
      dl += bf16_to_f64(p->dO[gr * D + d]) * bf16_to_f64(o_bf[gr * D + d]);
    out->delta[gr] = dl;
  }
  for (int64_t x = bh * Sq * D; x < (bh + 1) * Sq * D; x++) out->dq[x] = 0;
  for (int64_t x = bh * Skv * D; x < (bh + 1) * Skv * D; x++)
    out->dk[x] = out->dv[x] = 0;
  for (int c = 0; c < Skv; c++) out->kv_zero[bh * Skv + c] = 1;

  for (int r = 0; r < Sq; r++) {
    const int64_t gr = bh * Sq + r;
    const uint16_t *qr = p->q + gr * D, *dOr = p->dO + gr * D;
    for (int c = 0; c < Skv; c++) {
      if (!mask[(int64_t)r * Skv + c]) continue;
      const int64_t gc = bh * Skv + c;
      const uint16_t *kc = p->k + gc * D, *vc = p->v + gc * D;
      double s = 0, dp = 0;
      for (int d = 0; d < D; d++) {
        s += bf16_to_f64(qr[d]) * bf16_to_f64(kc[d]);
        dp += bf16_to_f64(dOr[d]) * bf16_to_f64(vc[d]);
      }
      double pr = exp2(s * c2 - out->lse[gr]);
      double ds = pr * (dp - out->delta[gr]);
      for (int d = 0; d < D; d++) {
        out->dq[gr * D + d] += sc * ds * bf16_to_f64(kc[d]);
        out->dk[gc * D + d] += sc * ds * bf16_to_f64(qr[d]);
        out->dv[gc * D + d] += pr * bf16_to_f64(dOr[d]);
      }
      out->kv_zero[gc] = 0;
    }
  }
}

/* Dense [Sq][Skv] mask of one (b, h) from the q2k lists and vbs. */
static void
build_mask(const problem *p, int64_t bh, unsigned char *mask)
{
  const int Sq = p->s.Sq, Skv = p->s.Skv;
  memset(mask, 0, (size_t)Sq * Skv);
  for (int i = 0; i < p->nq; i++) {
    const int32_t *row = p->q2k_idx + (bh * p->nq + i) * p->qw;
    for (int e = 0; e < p->q2k_num[bh * p->nq + i]; e++) {
      const int j = row[e];
      for (int t = 0; t < p->s.block; t++)
        for (int c = 0; c < p->vbs[j] && c < p->s.block; c++)
          mask[(int64_t)(i * p->s.block + t) * Skv + j * p->s.block + c] = 1;
    }
  }
}

// ---------------------------------------------------------------------------
// Running the reference

typedef struct {
  float *o, *lse, *dq, *dk, *dv, *delta;
} ref_out;

static int
run_forward(const problem *p, ref_out *r)
{
  fill_nan(r->o, p->nqe);
  fill_nan(r->lse, p->nqe / p->s.D);
  return vsa_forward_ref_cpu(&p->s, p->q, p->k, p->v, p->q2k_idx, p->q2k_num,
                             p->qw, p->vbs, r->o, r->lse);
}

static int
run_backward(const problem *p, const uint16_t *o_bf, const float *lse,
             ref_out *r)
{
  fill_nan(r->dq, p->nqe);
  fill_nan(r->dk, p->nke);
  fill_nan(r->dv, p->nke);
  fill_nan(r->delta, p->nqe / p->s.D);
  return vsa_backward_ref_cpu(&p->s, p->dO, p->q, p->k, p->v, o_bf, lse,
                              p->k2q_idx, p->k2q_num, p->kw, p->q2k_idx,
                              p->q2k_num, p->qw, p->vbs, r->dq, r->dk, r->dv,
                              r->delta);
}

static int
same_bits(const float *a, const float *b, int64_t n)
{
  return memcmp(a, b, sizeof(float) * (size_t)n) == 0;
}

static void
alloc_ref(ref_out *r, int64_t nqe, int64_t nke, int64_t rows)
{
  r->o = malloc(sizeof(float) * nqe);
  r->dq = malloc(sizeof(float) * nqe);
  r->dk = malloc(sizeof(float) * nke);
  r->dv = malloc(sizeof(float) * nke);
  r->lse = malloc(sizeof(float) * rows);
  r->delta = malloc(sizeof(float) * rows);
}

static void
free_ref(ref_out *r)
{
  free(r->o);
  free(r->dq);
  free(r->dk);
  free(r->dv);
  free(r->lse);
  free(r->delta);
}

// ---------------------------------------------------------------------------
// One configuration, all checks

static void
run_config(const config *cfg)
{
  const char *nm = cfg->name;
  problem p;
  memset(&p, 0, sizeof p);
  rng_state = cfg->seed;
  const int BLK = cfg->block;
  p.s = (vsa_shape){cfg->B, cfg->H, cfg->Sq, cfg->Skv, cfg->D,
                    (float)(1.0 / sqrt((double)cfg->D)), BLK};
  p.nq = cfg->Sq / BLK;
  p.nkv = cfg->Skv / BLK;
  p.qw = p.nkv + 3;
  p.kw = p.nq + 2;
  const int64_t BH = (int64_t)cfg->B * cfg->H, D = cfg->D;
  const int64_t qrows = BH * cfg->Sq, krows = BH * cfg->Skv;
  p.nqe = qrows * D;
  p.nke = krows * D;
  memcpy(p.vbs, cfg->vbs, sizeof(int32_t) * p.nkv);

  p.q = malloc(2 * p.nqe);
  p.dO = malloc(2 * p.nqe);
  p.k = malloc(2 * p.nke);
  p.v = malloc(2 * p.nke);
  p.q2k_idx = malloc(sizeof(int32_t) * BH * p.nq * p.qw);
  p.q2k_num = malloc(sizeof(int32_t) * BH * p.nq);
  p.k2q_idx = malloc(sizeof(int32_t) * BH * p.nkv * p.kw);
  p.k2q_num = malloc(sizeof(int32_t) * BH * p.nkv);
  fill_bf16(p.q, p.nqe, 2.0);
  fill_bf16(p.k, p.nke, 2.0);
  fill_bf16(p.v, p.nke, 1.0);
  fill_bf16(p.dO, p.nqe, 1.0);
  build_q2k(cfg, &p);
  build_k2q(cfg, &p);
  printf("# %s: B=%d H=%d Sq=%d Skv=%d D=%d seed=%llu\n", nm, cfg->B, cfg->H,
         cfg->Sq, cfg->Skv, cfg->D, (unsigned long long)cfg->seed);

  ref_out r, r2;
  alloc_ref(&r, p.nqe, p.nke, qrows);
  alloc_ref(&r2, p.nqe, p.nke, qrows);
  oracle_out w;
  w.o = malloc(sizeof(double) * p.nqe);
  w.dq = malloc(sizeof(double) * p.nqe);
  w.dk = malloc(sizeof(double) * p.nke);
  w.dv = malloc(sizeof(double) * p.nke);
  w.lse = malloc(sizeof(double) * qrows);
  w.delta = malloc(sizeof(double) * qrows);
  w.row_empty = malloc(qrows);
  w.kv_zero = malloc(krows);
  unsigned char *mask = malloc((size_t)cfg->Sq * cfg->Skv);
  uint16_t *o_bf = malloc(2 * p.nqe);
  float *lse_in = malloc(sizeof(float) * qrows);
  char detail[128];

  // -- forward -------------------------------------------------------------
  int rc = run_forward(&p, &r);
  snprintf(detail, sizeof detail, "rc=%d %s", rc, rc ? vsa_last_error() : "");
  check(rc == 0, nm, "forward returns 0", detail);
  for (int64_t bh = 0; bh < BH; bh++) {
    build_mask(&p, bh, mask);
    oracle_forward(&p, mask, bh, &w);
  }
  check_rel(nm, "o", r.o, w.o, p.nqe, 1e-4);

  double lse_err = 0;
  int64_t n_empty = 0, bad_empty = 0, lse_nonfinite = 0;
  for (int64_t x = 0; x < qrows; x++) {
    if (!isfinite(r.lse[x])) lse_nonfinite++;
    if (w.row_empty[x]) {
      n_empty++;
      int zero = r.lse[x] == VSA_LSE_EMPTY;
      for (int d = 0; d < D; d++) zero &= r.o[x * D + d] == 0.0f;
      bad_empty += !zero;
    } else {
      double e = fabs((double)r.lse[x] - w.lse[x]);
      if (!(e <= lse_err)) lse_err = e; /* NaN propagates to a fail */
    }
  }
  snprintf(detail, sizeof detail, "%.3e (< 1e-04), nonfinite %lld", lse_err,
           (long long)lse_nonfinite);
  check(lse_err < 1e-4 && lse_nonfinite == 0, nm, "lse max abs err vs fp64",
        detail);
  snprintf(detail, sizeof detail, "%lld empty rows, %lld wrong",
           (long long)n_empty, (long long)bad_empty);
  check(n_empty > 0 && bad_empty == 0, nm,
        "empty rows: o == 0, lse == VSA_LSE_EMPTY", detail);

  // -- backward ------------------------------------------------------------
  for (int64_t x = 0; x < p.nqe; x++) o_bf[x] = f32_to_bf16(r.o[x]);
  rc = run_backward(&p, o_bf, r.lse, &r);
  snprintf(detail, sizeof detail, "rc=%d %s", rc, rc ? vsa_last_error() : "");
  check(rc == 0, nm, "backward returns 0", detail);
  for (int64_t bh = 0; bh < BH; bh++) {
    build_mask(&p, bh, mask);
    oracle_backward(&p, mask, bh, o_bf, &w);
  }
  check_rel(nm, "dq", r.dq, w.dq, p.nqe, 1e-4);
  check_rel(nm, "dk", r.dk, w.dk, p.nke, 1e-4);
  check_rel(nm, "dv", r.dv, w.dv, p.nke, 1e-4);
  check_rel(nm, "Delta", r.delta, w.delta, qrows, 1e-5);

  /* Exact zeros: dk/dv of kv rows nothing validly attends to (invalid
   * slots, vbs = 0 blocks, unselected blocks), dq of empty q rows. */
  int64_t nz = 0, bad = 0;
  for (int64_t x = 0; x < krows; x++) {
    if (!w.kv_zero[x]) continue;
    nz++;
    for (int d = 0; d < D; d++)
      bad += r.dk[x * D + d] != 0.0f || r.dv[x * D + d] != 0.0f;
  }
  snprintf(detail, sizeof detail, "%lld rows, %lld nonzero values",
           (long long)nz, (long long)bad);
  check(nz > 0 && bad == 0, nm, "dk, dv exactly 0 on unattended kv rows",
        detail);
  nz = bad = 0;
  for (int64_t x = 0; x < qrows; x++) {
    if (!w.row_empty[x]) continue;
    nz++;
    for (int d = 0; d < D; d++) bad += r.dq[x * D + d] != 0.0f;
  }
  snprintf(detail, sizeof detail, "%lld rows, %lld nonzero values",
           (long long)nz, (long long)bad);
  check(nz > 0 && bad == 0, nm, "dq exactly 0 on rows with no valid key",
        detail);
  if (cfg->special) {
    /* The planted unselected block (kv block 3 of (b0, h0)) and the planted
     * empty block (kv block 1, vbs = 0) are exactly 0 in every slot. */
    int ok = 1;
    for (int64_t x = 3 * BLK * D; x < 4 * BLK * D; x++)
      ok &= r.dk[x] == 0.0f && r.dv[x] == 0.0f;
    for (int64_t bh = 0; bh < BH; bh++)
      for (int64_t x = (bh * cfg->Skv + BLK) * D;
           x < (bh * cfg->Skv + 2 * BLK) * D; x++)
        ok &= r.dk[x] == 0.0f && r.dv[x] == 0.0f;
    check(ok, nm, "unselected and vbs=0 blocks: dk = dv = 0", "");
  }

  // -- invariance: bitwise-identical results -------------------------------
  /* (1) other garbage in the list tails. */
  refill_tails(p.q2k_idx, p.q2k_num, BH * p.nq, p.qw);
  refill_tails(p.k2q_idx, p.k2q_num, BH * p.nkv, p.kw);
  int ok = run_forward(&p, &r2) == 0 && run_backward(&p, o_bf, r.lse, &r2) == 0;
  ok = ok && same_bits(r.o, r2.o, p.nqe) && same_bits(r.lse, r2.lse, qrows) &&
       same_bits(r.dq, r2.dq, p.nqe) && same_bits(r.dk, r2.dk, p.nke) &&
       same_bits(r.dv, r2.dv, p.nke);
  check(ok, nm, "bitwise same with other list-tail garbage", "");

  /* (2) lse of empty rows given as +inf, -inf, 0. */
  static const float empty_lse[] = {INFINITY, -INFINITY, 0.0f};
  for (int t = 0; t < 3; t++) {
    for (int64_t x = 0; x < qrows; x++)
      lse_in[x] = w.row_empty[x] ? empty_lse[t] : r.lse[x];
    ok = run_backward(&p, o_bf, lse_in, &r2) == 0 &&
         same_bits(r.dq, r2.dq, p.nqe) && same_bits(r.dk, r2.dk, p.nke) &&
         same_bits(r.dv, r2.dv, p.nke);
    snprintf(detail, sizeof detail, "lse = %g", empty_lse[t]);
    check(ok, nm, "bitwise same with other empty-row lse", detail);
  }

  /* (3) padded K/V slots (t >= vbs) holding other values, Inf/NaN too. */
  static const uint16_t junk[] = {0x7fc0u, 0x7f80u, 0xff80u, 0x4780u, 0x0000u};
  for (int64_t bh = 0; bh < BH; bh++)
    for (int j = 0; j < p.nkv; j++)
      for (int t = p.vbs[j] < 0 ? 0 : p.vbs[j]; t < BLK; t++)
        for (int d = 0; d < D; d++) {
          int64_t x = (bh * cfg->Skv + (int64_t)j * BLK + t) * D + d;
          p.k[x] = junk[rng_int(5)];
          p.v[x] = junk[rng_int(5)];
        }
  ok = run_forward(&p, &r2) == 0 && run_backward(&p, o_bf, r.lse, &r2) == 0;
  ok = ok && same_bits(r.o, r2.o, p.nqe) && same_bits(r.lse, r2.lse, qrows) &&
       same_bits(r.dq, r2.dq, p.nqe) && same_bits(r.dk, r2.dk, p.nke) &&
       same_bits(r.dv, r2.dv, p.nke);
  check(ok, nm, "bitwise same with Inf/NaN in padded K/V slots", "");

  // -- bad input is an error, not a crash ----------------------------------
  int32_t saved = p.q2k_idx[0], saved_n = p.q2k_num[0];
  p.q2k_num[0] = 1;
  p.q2k_idx[0] = p.nkv; /* out of range inside the count */
  rc = vsa_forward_ref_cpu(&p.s, p.q, p.k, p.v, p.q2k_idx, p.q2k_num, p.qw,
                           p.vbs, r2.o, r2.lse);
  snprintf(detail, sizeof detail, "rc=%d: %s", rc, vsa_last_error());
  check(rc == -1, nm, "out-of-range list index rejected", detail);
  p.q2k_idx[0] = saved;
  p.q2k_num[0] = saved_n;

  free(p.q);
  free(p.dO);
  free(p.k);
  free(p.v);
  free(p.q2k_idx);
  free(p.q2k_num);
  free(p.k2q_idx);
  free(p.k2q_num);
  free_ref(&r);
  free_ref(&r2);
  free(w.o);
  free(w.dq);
  free(w.dk);
  free(w.dv);
  free(w.lse);
  free(w.delta);
  free(w.row_empty);
  free(w.kv_zero);
  free(mask);
  free(o_bf);
  free(lse_in);
}

// ---------------------------------------------------------------------------
// A stop inside one head

/* The watcher: once the backward has written kv block 0's dk (its first
 * value is no longer the NaN poison), it raises the point timeout, as the
 * --point-timeout timer does. */
static const float *watch_dk;
static int watch_done; /* the backward returned: stop watching (an error before block 0) */
static void *
raise_timeout_after_block0(void *unused)
{
  (void)unused;
  for (;;) {
    float x;
    __atomic_load((const uint32_t *)watch_dk, (uint32_t *)&x, __ATOMIC_ACQUIRE);
    if (!isnan(x)) break;
    if (__atomic_load_n(&watch_done, __ATOMIC_ACQUIRE)) return NULL;
  }
  vsa_timeout_flag = 1;
  return NULL;
}

/* One head of 512 kv blocks, four q blocks each: the backward must stop at
 * the next kv block once the timeout is raised, not finish the head (it
 * looked for a stop once per head, so Ctrl-C on a one-head problem waited
 * out the whole reference). The watcher has the other 511 blocks' time
 * (about 0.5 s here) to see block 0 done, whatever the host's speed within
 * reason. */
static void
check_stop_inside_head(void)
{
  enum { N = 512, BLK = 64, D = 16, W = 4 };
  const int64_t S = (int64_t)N * BLK, ne = S * D;
  vsa_shape s = {1, 1, (int)S, (int)S, D, 0.25f, BLK};
  uint16_t *q = malloc(2 * ne), *k = malloc(2 * ne), *v = malloc(2 * ne), *dO = malloc(2 * ne);
  uint16_t *o = malloc(2 * ne);
  float *lse = malloc(sizeof(float) * S), *dq = malloc(sizeof(float) * ne);
  float *dk = malloc(sizeof(float) * ne), *dv = malloc(sizeof(float) * ne);
  float *delta = malloc(sizeof(float) * S);
  int32_t *q2k_idx = malloc(sizeof(int32_t) * N * W), *q2k_num = malloc(sizeof(int32_t) * N);
  int32_t *k2q_idx = malloc(sizeof(int32_t) * N * W), *k2q_num = malloc(sizeof(int32_t) * N);
  int32_t *vbs = malloc(sizeof(int32_t) * N);
  fill_bf16(q, ne, 1.0);
  fill_bf16(k, ne, 1.0);
  fill_bf16(v, ne, 1.0);
  fill_bf16(dO, ne, 1.0);
  fill_bf16(o, ne, 0.1);
  /* q block i selects kv blocks i..i+3 (mod N); kv block j is selected by
   * q blocks j-3..j, listed ascending. */
  for (int i = 0; i < N; i++) {
    vbs[i] = BLK;
    q2k_num[i] = k2q_num[i] = W;
    for (int e = 0; e < W; e++) q2k_idx[i * W + e] = (i + e) % N;
    int n = 0;
    for (int x = 0; x < N && n < W; x++)
      if ((x - (i - W + 1) + N) % N < W) k2q_idx[i * W + n++] = x;
  }
  for (int64_t r = 0; r < S; r++) lse[r] = 0.0f;
  fill_nan(dq, ne);
  fill_nan(dk, ne);
  fill_nan(dv, ne);
  fill_nan(delta, S);
  watch_dk = dk;
  pthread_t th;
  int started = pthread_create(&th, NULL, raise_timeout_after_block0, NULL) == 0;
  int rc = vsa_backward_ref_cpu(&s, dO, q, k, v, o, lse, k2q_idx, k2q_num, W, q2k_idx, q2k_num,
                                W, vbs, dq, dk, dv, delta);
  __atomic_store_n(&watch_done, 1, __ATOMIC_RELEASE);
  if (started) pthread_join(th, NULL);
  vsa_timeout_flag = 0;
  char detail[160];
  snprintf(detail, sizeof detail, "rc=%d: %s", rc, rc ? vsa_last_error() : "");
  check(started && rc == -1 && strstr(vsa_last_error(), "point timeout!") != NULL, "stop",
        "a timeout inside a one-head backward ends it", detail);
  check(isnan(dk[(S - 1) * D]) && isnan(dq[0]), "stop",
        "it stopped before the head's last kv block and its dq", "");
  free(q); free(k); free(v); free(dO); free(o); free(lse); free(dq); free(dk); free(dv);
  free(delta); free(q2k_idx); free(q2k_num); free(k2q_idx); free(k2q_num); free(vbs);
}

int
main(void)
{
  /* nkv = 5: full, empty, half, full (unselected in (b0, h0)), 17 valid. */
  static const int32_t vbs_a[] = {64, 0, 32, 64, 17};
  static const int32_t vbs_b[] = {32, 64};
  static const int32_t vbs_c[] = {64, 5, 64};
  /* Block 128: full, empty, 100 valid (past the first 64 tokens), full
   * (unselected in (b0, h0)), 64 valid (exactly the first half), 1 valid. */
  static const int32_t vbs_d[] = {128, 0, 100, 128, 64, 1};
  static const int32_t vbs_e[] = {77, 128};
  const config cfgs[] = {
      {"cfg1", 2, 2, 256, 320, 64, 0x5eed0001ull, vbs_a, 1, 64},
      {"cfg2", 1, 3, 192, 128, 128, 0x5eed0002ull, vbs_b, 0, 64},
      {"cfg3", 2, 1, 128, 192, 48, 0x5eed0003ull, vbs_c, 0, 64},
      {"blk128-a", 2, 2, 512, 768, 64, 0x5eed0004ull, vbs_d, 1, 128},
      {"blk128-b", 1, 2, 384, 256, 128, 0x5eed0005ull, vbs_e, 0, 128},
  };
  for (size_t c = 0; c < sizeof cfgs / sizeof cfgs[0]; c++)
    run_config(&cfgs[c]);

  /* Shape errors are reported, not crashed on. */
  vsa_shape bad = {1, 1, 100, 64, 64, 0.125f, 64};
  int rc = vsa_forward_ref_cpu(&bad, NULL, NULL, NULL, NULL, NULL, 0, NULL,
                               NULL, NULL);
  char detail[160];
  snprintf(detail, sizeof detail, "rc=%d: %s", rc, vsa_last_error());
  check(rc == -1, "shape", "Sq not a multiple of 64 rejected", detail);
  vsa_shape odd = {1, 1, 192, 192, 64, 0.125f, 96};
  rc = vsa_forward_ref_cpu(&odd, NULL, NULL, NULL, NULL, NULL, 0, NULL, NULL, NULL);
  snprintf(detail, sizeof detail, "rc=%d: %s", rc, vsa_last_error());
  check(rc == -1 && strstr(vsa_last_error(), "64, 128") != NULL, "shape",
        "block 96 rejected naming the supported sizes", detail);
  vsa_shape half = {1, 1, 192, 256, 64, 0.125f, 128};
  rc = vsa_forward_ref_cpu(&half, NULL, NULL, NULL, NULL, NULL, 0, NULL, NULL, NULL);
  snprintf(detail, sizeof detail, "rc=%d: %s", rc, vsa_last_error());
  check(rc == -1, "shape", "block 128: Sq = 192 (1.5 blocks) rejected", detail);
  check_stop_inside_head();

  printf("%d passed, %d failed\n", n_pass, n_fail);
  return n_fail != 0;
}
