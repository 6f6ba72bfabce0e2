/* vsa_lists.c — VSA-like block lists, honestly generated (src/core/vsa_lists.h).
 *
 * Real VSA lists come from data with spatial structure: FastVideo mean-pools
 * q and k over 4×4×4 tiles of the video latent and keeps, for each q tile,
 * the top-k kv tiles by pooled score. Uniform random lists have none of that
 * locality. This file makes inputs with a tunable correlation length on the
 * latent (vsa_smooth_latent), selects lists from them exactly as FastVideo
 * does (vsa_build_vsa_topk), and measures how much neighbouring kv blocks'
 * lists overlap (vsa_list_sharing) — the quantity a kernel pairing kv blocks
 * can exploit.
 *
 * The heavy loops (a separable filter over B·H·S·D values, B·H·nq·nkv·D
 * multiply-adds for the scores) run on host threads, one (b, h) slice each;
 * every slice is computed alone in a fixed order, so results do not depend
 * on the thread count. Threads record failures in a shared slot; the
 * caller's thread turns the first one into the recorded error (check.h's
 * slot is thread-local).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bsa.h"
#include "check.h"
#include "slices.h"
#include "tensor.h"
#include "vsa_lists.h"

int
vsa_lists_default_threads(void)
{
  return vsa_host_threads();
}

/* What a slice failed with (slices.h); the lowest failing slice is kept. */
enum { SLICE_OK = 0, SLICE_OOM, SLICE_NONFINITE_Q, SLICE_NONFINITE_K };

// ----------------------------------------------------------------------------
// latent layout

/* blocks, and the token of each latent cell (cells in (t, h, w) row-major). */
static int
latent_tokens(const vsa_latent *l, int *nblocks, int64_t **tok_out)
{
  VSA_TRY(vsa_build_video_blocks(l->T, l->Hh, l->W, l->tT, l->tH, l->tW, NULL,
                                 nblocks));
  int64_t ncell = (int64_t)l->T * l->Hh * l->W;
  int64_t *tok = malloc((size_t)ncell * sizeof *tok);
  if (!tok) return vsa_fail("vsa lists: out of host memory (%lld cells)", (long long)ncell);
  int nh = (l->Hh + l->tH - 1) / l->tH, nw = (l->W + l->tW - 1) / l->tW;
  const int64_t blk = (int64_t)l->tT * l->tH * l->tW; /* the block size */
  for (int t = 0; t < l->T; t++)
    for (int h = 0; h < l->Hh; h++)
      for (int w = 0; w < l->W; w++) {
        int it = t / l->tT, ih = h / l->tH, iw = w / l->tW;
        int eh = l->Hh - ih * l->tH < l->tH ? l->Hh - ih * l->tH : l->tH;
        int ew = l->W - iw * l->tW < l->tW ? l->W - iw * l->tW : l->tW;
        int64_t block = ((int64_t)it * nh + ih) * nw + iw;
        int a = t - it * l->tT, b = h - ih * l->tH, e = w - iw * l->tW;
        tok[((int64_t)t * l->Hh + h) * l->W + w] =
            block * blk + ((int64_t)a * eh + b) * ew + e;
      }
  *tok_out = tok;
  return 0;
}

// ----------------------------------------------------------------------------
// correlated inputs

typedef struct {
  uint16_t *x;
  int D;
  int64_t S, ncell;
  const int64_t *tok;
  int T, Hh, W;
  int R;            /* filter radius; -1: no filter */
  const float *g;   /* taps g[r + R], r = -R..R */
  const float *norm[3]; /* per axis (w, h, t), per coordinate */
} smooth_ctx;

/* One filter pass along an axis of length N (stride s_ax cells) for every
 * line: lines start at o·s_out + i·s_in. acc: D floats of scratch. */
static void
filter_axis(const float *src, float *dst, int D, int n_out, int64_t s_out,
            int n_in, int64_t s_in, int N, int64_t s_ax, const float *g,
            int R, const float *norm, float *acc)
{
  for (int o = 0; o < n_out; o++)
    for (int i = 0; i < n_in; i++) {
      int64_t base = o * s_out + i * s_in;
      for (int c = 0; c < N; c++) {
        for (int d = 0; d < D; d++) acc[d] = 0.f;
        int lo = c < R ? -c : -R, hi = c + R >= N ? N - 1 - c : R;
        for (int r = lo; r <= hi; r++) {
          const float wt = g[r + R];
          const float *p = src + (base + (int64_t)(c + r) * s_ax) * D;
          for (int d = 0; d < D; d++) acc[d] += wt * p[d];
        }
        float *out = dst + (base + (int64_t)c * s_ax) * D;
        const float nm = norm[c];
        for (int d = 0; d < D; d++) out[d] = acc[d] * nm;
      }
    }
}

static int
smooth_slice(void *vctx, int slice, int *detail)
{
  smooth_ctx *c = vctx;
  int D = c->D;
  int64_t n = c->ncell * D;
  float *a = malloc((size_t)n * sizeof *a);
  float *b = malloc((size_t)n * sizeof *b);
  float *acc = malloc((size_t)D * sizeof *acc);
  double *mean = malloc((size_t)D * sizeof *mean), *var = malloc((size_t)D * sizeof *var);
  if (!a || !b || !acc || !mean || !var) {
    free(a); free(b); free(acc); free(mean); free(var);
    return SLICE_OOM;
  }
  uint16_t *x = c->x + (int64_t)slice * c->S * D;
  for (int64_t p = 0; p < c->ncell; p++) {
    const uint16_t *src = x + c->tok[p] * D;
    for (int d = 0; d < D; d++) a[p * D + d] = vsa_bf16_to_f32(src[d]);
  }
  float *v = a;
  if (c->R >= 0) {
    int64_t hw = (int64_t)c->Hh * c->W;
    /* w: lines over (t, h); h: over (t, w); t: over (h, w). */
    filter_axis(a, b, D, c->T, hw, c->Hh, c->W, c->W, 1, c->g, c->R, c->norm[0], acc);
    filter_axis(b, a, D, c->T, hw, c->W, 1, c->Hh, c->W, c->g, c->R, c->norm[1], acc);
    filter_axis(a, b, D, c->Hh, c->W, c->W, 1, c->T, hw, c->g, c->R, c->norm[2], acc);
    v = b;
  }
  for (int d = 0; d < D; d++) mean[d] = var[d] = 0;
  for (int64_t p = 0; p < c->ncell; p++)
    for (int d = 0; d < D; d++) mean[d] += v[p * D + d];
  for (int d = 0; d < D; d++) mean[d] /= (double)c->ncell;
  for (int64_t p = 0; p < c->ncell; p++)
    for (int d = 0; d < D; d++) {
      double t = v[p * D + d] - mean[d];
      var[d] += t * t;
    }
  for (int d = 0; d < D; d++) {
    var[d] /= (double)c->ncell;
    /* var now holds the scale; a constant channel stays as it is. */
    if (var[d] > 0) {
      var[d] = 1 / sqrt(var[d]);
    } else {
      var[d] = 1;
      mean[d] = 0;
    }
  }
  memset(x, 0, (size_t)c->S * D * sizeof *x);
  for (int64_t p = 0; p < c->ncell; p++) {
    uint16_t *dst = x + c->tok[p] * D;
    for (int d = 0; d < D; d++)
      dst[d] = vsa_f32_to_bf16((float)((v[p * D + d] - mean[d]) * var[d]));
  }
  free(a); free(b); free(acc); free(mean); free(var);
  (void)detail;
  return SLICE_OK;
}

/* 1/sqrt(Σ g[r]²) over the taps inside an axis of length N, per coordinate. */
static void
edge_norms(const float *g, int R, int N, float *norm)
{
  for (int c = 0; c < N; c++) {
    double s = 0;
    for (int r = -R; r <= R; r++)
      if (c + r >= 0 && c + r < N) s += (double)g[r + R] * g[r + R];
    norm[c] = (float)(1 / sqrt(s));
  }
}

int
vsa_smooth_latent(uint16_t *x, int BH, int D, const vsa_latent *lat,
                  double ell, int nthreads)
{
  if (BH < 1) return vsa_fail("smooth_latent: B*H must be positive, got %d", BH);
  if (D < 1) return vsa_fail("smooth_latent: head dim must be positive, got %d", D);
  if (!(ell >= 0 && ell <= 64))
    return vsa_fail("smooth_latent: ell must be a number in [0, 64], got %g", ell);
  int nblocks;
  int64_t *tok = NULL;
  VSA_TRY(latent_tokens(lat, &nblocks, &tok));
  smooth_ctx c = {x, D, (int64_t)nblocks * lat->tT * lat->tH * lat->tW,
                  (int64_t)lat->T * lat->Hh * lat->W, tok, lat->T, lat->Hh,
                  lat->W, -1, NULL, {NULL, NULL, NULL}};
  float *g = NULL, *norms = NULL;
  if (ell > 0) {
    double sigma = ell / 2;
    int R = (int)ceil(3 * sigma);
    g = malloc((size_t)(2 * R + 1) * sizeof *g);
    norms = malloc((size_t)(lat->W + lat->Hh + lat->T) * sizeof *norms);
    if (!g || !norms) {
      free(g); free(norms); free(tok);
      return vsa_fail("smooth_latent: out of host memory");
    }
    for (int r = -R; r <= R; r++) g[r + R] = (float)exp(-(double)r * r / (2 * sigma * sigma));
    edge_norms(g, R, lat->W, norms);
    edge_norms(g, R, lat->Hh, norms + lat->W);
    edge_norms(g, R, lat->T, norms + lat->W + lat->Hh);
    c.R = R;
    c.g = g;
    c.norm[0] = norms;
    c.norm[1] = norms + lat->W;
    c.norm[2] = norms + lat->W + lat->Hh;
  }
  int es, ed;
  int rc = vsa_run_slices(BH, nthreads, smooth_slice, &c, &es, &ed);
  free(g); free(norms); free(tok);
  if (rc != SLICE_OK)
    return vsa_fail("smooth_latent: out of host memory (slice %d, %lld cells x %d)", es,
                    (long long)c.ncell, D);
  return 0;
}

// ----------------------------------------------------------------------------
// FastVideo's top-k selection

typedef struct {
  const uint16_t *q, *k;
  int block, nq, nkv, D, topk, width;
  const int32_t *q_vbs, *kv_vbs;
  int32_t *idx, *num;
} topk_ctx;

static float
bf16_round(float f)
{
  return vsa_bf16_to_f32(vsa_f32_to_bf16(f));
}

/* Block means of x [nb·block, D] as FastVideo's fused_block_mean computes
 * them: each block's valid tokens (its first vbs; FastVideo sums the whole
 * block, whose padding it keeps at 0) summed to an fp32 value, divided by
 * vbs in fp32, rounded to bf16, into out [nb, D]. The sum is accumulated in
 * fp64 (exact for bf16 inputs of one block in any realistic range) and
 * rounded once to fp32: the value an fp32 sum in any order approximates.
 * A block with vbs = 0 is marked empty (empty[j] = 1; FastVideo's 0/0 is
 * NaN, which drops the block from the selection, see topk_slice) and pools
 * to 0. Returns -1 - block on a non-finite mean of a non-empty block. */
static int
pool_blocks(const uint16_t *x, int nb, int block, int D, const int32_t *vbs, float *out,
            unsigned char *empty, double *acc)
{
  for (int j = 0; j < nb; j++) {
    int n = vbs[j];
    empty[j] = n == 0;
    for (int d = 0; d < D; d++) acc[d] = 0;
    for (int t = 0; t < n; t++) {
      const uint16_t *row = x + ((int64_t)j * block + t) * D;
      for (int d = 0; d < D; d++) acc[d] += vsa_bf16_to_f32(row[d]);
    }
    for (int d = 0; d < D; d++) {
      float m = n > 0 ? bf16_round((float)acc[d] / (float)n) : 0.f;
      if (!isfinite(m)) return -1 - j;
      out[(int64_t)j * D + d] = m;
    }
  }
  return 0;
}

/* Larger key = better: the score's bits in an order-preserving map, then
 * the lower kv index. */
static uint64_t
score_key(float s, int j)
{
  uint32_t u;
  memcpy(&u, &s, 4);
  u = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
  return ((uint64_t)u << 32) | (uint64_t)(0xffffffffu - (uint32_t)j);
}

/* Wirth's selection, descending: afterwards a[0..k-1] hold the k largest. */
static void
select_largest(uint64_t *a, int n, int k)
{
  int l = 0, r = n - 1, kk = k - 1;
  while (l < r) {
    uint64_t x = a[kk];
    int i = l, j = r;
    do {
      while (a[i] > x) i++;
      while (x > a[j]) j--;
      if (i <= j) {
        uint64_t t = a[i];
        a[i] = a[j];
        a[j] = t;
        i++;
        j--;
      }
    } while (i <= j);
    if (j < kk) l = i;
    if (kk < i) r = j;
  }
}

static int
topk_slice(void *vctx, int slice, int *detail)
{
  topk_ctx *c = vctx;
  int D = c->D, nq = c->nq, nkv = c->nkv;
  float *qc = malloc((size_t)nq * D * sizeof *qc);
  float *kc = malloc((size_t)nkv * D * sizeof *kc);
  float *kt = malloc((size_t)nkv * D * sizeof *kt);
  float *s = malloc((size_t)nkv * sizeof *s);
  uint64_t *key = malloc((size_t)nkv * sizeof *key);
  unsigned char *mark = calloc((size_t)nkv, 1);
  unsigned char *q_empty = malloc((size_t)nq), *kv_empty = malloc((size_t)nkv);
  double *acc = malloc((size_t)D * sizeof *acc);
  int rc = SLICE_OK;
  if (!qc || !kc || !kt || !s || !key || !mark || !acc || !q_empty || !kv_empty) {
    rc = SLICE_OOM;
    goto done;
  }
  const int blk = c->block;
  int e = pool_blocks(c->q + (int64_t)slice * nq * blk * D, nq, blk, D, c->q_vbs, qc, q_empty,
                      acc);
  if (e) {
    *detail = -1 - e;
    rc = SLICE_NONFINITE_Q;
    goto done;
  }
  e = pool_blocks(c->k + (int64_t)slice * nkv * blk * D, nkv, blk, D, c->kv_vbs, kc, kv_empty,
                  acc);
  int n_live = 0; /* kv blocks with a finite (FastVideo: non-NaN) score */
  for (int j = 0; j < nkv; j++) n_live += !kv_empty[j];
  if (e) {
    *detail = -1 - e;
    rc = SLICE_NONFINITE_K;
    goto done;
  }
  for (int j = 0; j < nkv; j++)
    for (int d = 0; d < D; d++) kt[(int64_t)d * nkv + j] = kc[(int64_t)j * D + d];
  /* torch divides a CUDA bf16 tensor by a Python scalar as a product with
   * the fp32 reciprocal of the fp32 scalar (BinaryDivTrueKernel.cu,
   * div_true_kernel_cuda's CPU-scalar branch); the product is rounded to
   * bf16. For D = 64 the reciprocal is exact (1/8). */
  const float inv_root = 1.0f / (float)sqrt((double)D);
  for (int i = 0; i < nq; i++) {
    int32_t *row = c->idx + ((int64_t)slice * nq + i) * c->width;
    /* FastVideo's rule on NaN scores (a 0-valid block's 0/0 mean): its
     * fused_topk_mask compares scores against a threshold, and NaN never
     * compares true, so an empty kv block is never kept (a row keeps
     * min(topk, live kv blocks)) and an empty q block keeps none. */
    int keep = q_empty[i] ? 0 : (c->topk < n_live ? c->topk : n_live);
    c->num[(int64_t)slice * nq + i] = keep;
    for (int x = 0; x < c->width; x++) row[x] = -1;
    if (keep == 0) continue;
    /* Each s[j] sums its products in ascending d (f32, exact products of
     * bf16 values), vectorised across j. */
    for (int j = 0; j < nkv; j++) s[j] = 0.f;
    const float *qi = qc + (int64_t)i * D;
    for (int d = 0; d < D; d++) {
      const float qd = qi[d];
      const float *kd = kt + (int64_t)d * nkv;
      for (int j = 0; j < nkv; j++) s[j] += qd * kd[j];
    }
    for (int j = 0; j < nkv; j++) {
      float sc = bf16_round(bf16_round(s[j]) * inv_root);
      if (sc == 0) sc = 0.f; /* -0 and +0 tie */
      /* An empty kv block sorts below every live one: never kept. */
      key[j] = kv_empty[j] ? (uint64_t)(0xffffffffu - (uint32_t)j) : score_key(sc, j);
    }
    select_largest(key, nkv, keep);
    for (int x = 0; x < keep; x++) mark[0xffffffffu - (uint32_t)key[x]] = 1;
    int o = 0;
    for (int j = 0; j < nkv; j++)
      if (mark[j]) {
        row[o++] = j;
        mark[j] = 0;
      }
  }
done:
  free(qc); free(kc); free(kt); free(s); free(key); free(mark); free(acc);
  free(q_empty); free(kv_empty);
  return rc;
}

int
vsa_build_vsa_topk(const uint16_t *q, const uint16_t *k, int BH, int block, int nq,
                   int nkv, int D, const int32_t *q_vbs,
                   const int32_t *kv_vbs, int topk, int width, int32_t *idx,
                   int32_t *num, int nthreads)
{
  VSA_TRY(vsa_block_check(block, "vsa_topk"));
  if (BH < 1 || nq < 1 || nkv < 1 || D < 1)
    return vsa_fail("vsa_topk: B*H %d, nq %d, nkv %d and D %d must be positive", BH, nq,
                    nkv, D);
  if (width < 1) return vsa_fail("vsa_topk: width must be positive, got %d", width);
  if (topk < 0 || topk > nkv || topk > width)
    return vsa_fail("vsa_topk: topk %d must be in [0, min(nkv %d, width %d)]", topk, nkv,
                    width);
  for (int j = 0; j < nkv; j++)
    if (kv_vbs[j] < 0 || kv_vbs[j] > block)
      return vsa_fail("vsa_topk: variable_block_sizes[%d] is %d, expected [0, %d]", j,
                      kv_vbs[j], block);
  for (int j = 0; j < nq; j++)
    if (q_vbs[j] < 0 || q_vbs[j] > block)
      return vsa_fail("vsa_topk: q_variable_block_sizes[%d] is %d, expected [0, %d]", j,
                      q_vbs[j], block);
  topk_ctx c = {q, k, block, nq, nkv, D, topk, width, q_vbs, kv_vbs, idx, num};
  int es, ed;
  int rc = vsa_run_slices(BH, nthreads, topk_slice, &c, &es, &ed);
  switch (rc) {
  case SLICE_OK: return 0;
  case SLICE_NONFINITE_Q:
    return vsa_fail("vsa_topk: q has a non-finite block mean (slice b*H+h = %d, q block %d)", es, ed);
  case SLICE_NONFINITE_K:
    return vsa_fail("vsa_topk: k has a non-finite block mean (slice b*H+h = %d, kv block %d)", es, ed);
  default:
    return vsa_fail("vsa_topk: out of host memory (nq %d, nkv %d, D %d)", nq, nkv, D);
  }
}

// ----------------------------------------------------------------------------
// pair sharing

int
vsa_list_sharing(const int32_t *idx, const int32_t *num, int BH, int nq,
                 int width, int nkv, double *sharing, int64_t *counted)
{
  if (BH < 1 || nq < 1 || nkv < 1 || width < 1)
    return vsa_fail("list_sharing: B*H %d, nq %d, nkv %d and width %d must be positive", BH,
                    nq, nkv, width);
  int32_t *cnt = calloc((size_t)nkv, sizeof *cnt);
  int32_t *shared = calloc((size_t)nkv, sizeof *shared);
  int32_t *stamp = malloc((size_t)nkv * sizeof *stamp);
  if (!cnt || !shared || !stamp) {
    free(cnt); free(shared); free(stamp);
    return vsa_fail("list_sharing: out of host memory (nkv %d)", nkv);
  }
  double total = 0;
  int64_t n = 0;
  int rc = 0;
  for (int bh = 0; bh < BH && rc == 0; bh++) {
    memset(cnt, 0, (size_t)nkv * sizeof *cnt);
    memset(shared, 0, (size_t)nkv * sizeof *shared);
    for (int j = 0; j < nkv; j++) stamp[j] = -1;
    for (int i = 0; i < nq && rc == 0; i++) {
      const int32_t *row = idx + ((int64_t)bh * nq + i) * width;
      int m = num[(int64_t)bh * nq + i];
      if (m < 0 || m > width) {
        rc = vsa_fail("list_sharing: q2k_num is %d at (slice %d, q block %d), expected [0, %d]",
                      m, bh, i, width);
        break;
      }
      for (int x = 0; x < m; x++) {
        int j = row[x];
        if (j < 0 || j >= nkv) {
          rc = vsa_fail("list_sharing: q2k_idx: index %d out of range [0, %d) at (slice %d, q block %d)",
                        j, nkv, bh, i);
          break;
        }
        if (stamp[j] == i) {
          rc = vsa_fail("list_sharing: q2k_idx: index %d repeated at (slice %d, q block %d)", j,
                        bh, i);
          break;
        }
        stamp[j] = i;
      }
      if (rc) break;
      for (int x = 0; x < m; x++) {
        int j = row[x], p = j ^ 1;
        cnt[j]++;
        if (p < nkv && stamp[p] == i) shared[j]++;
      }
    }
    for (int j = 0; j < nkv && rc == 0; j++)
      if ((j ^ 1) < nkv && cnt[j] > 0) {
        total += (double)shared[j] / cnt[j];
        n++;
      }
  }
  free(cnt); free(shared); free(stamp);
  if (rc) return rc;
  *sharing = n > 0 ? total / (double)n : NAN;
  *counted = n;
  return 0;
}
