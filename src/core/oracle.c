/* oracle.c — fp64 brute-force block-sparse attention, forward and backward.
 *
 * The yardstick of every correctness case (CASES.md): deliberately plain
 * and written apart from the reference and the kernels. It shares with them
 * only the conventions of bsa.h. Per (b, h) slice it turns the q2k lists
 * into a boolean block mask, one q-block row at a time (entries past a
 * row's count are never read, repeats just set the same bit), and then, per
 * q row, loops over every valid key of the masked kv blocks:
 *
 *   x_c = (q·k_c)·sm_scale·log2 e            (fp64)
 *   forward: lse = max x + log2 Σ exp2(x − max), o = Σ exp2(x − lse)·v_c;
 *            no valid key: o = 0, lse = VSA_LSE_EMPTY
 *   backward: P = exp2(x − lse), Delta = dO·o, dS = P·(dO·v_c − Delta),
 *             dq += sm_scale·dS·k_c, dk_c += sm_scale·dS·q, dv_c += P·dO
 *
 * Cost control for spot checks at big shapes: rows are visited only for
 * q blocks that are listed or that select a listed kv block; a row that is
 * needed only for dk/dv, with o_in/lse_in given, touches only the keys of
 * listed kv blocks. Without o_in such rows still need their whole forward
 * (lse and o over every key), which is the bulk of the time. The work runs
 * on every host core (slices.h) in two passes, and each output element is
 * summed in one fixed order (the plain loop's over rows and keys), so
 * results do not depend on the thread count. Memory is O(Sq + Skv + nq·(listed kv blocks)) beyond
 * the caller's arrays: no S×S matrix is formed.
 *
 * q, k, v, dO, o_in, o_out and dq, dk, dv are in a->layout (BHSD or BSHD,
 * bsa.h): a head's token t lies at vsa_head_offset + t·vsa_token_stride;
 * lse_in/lse_out are [B,H,Sq] in both.
 *
 * o_out/lse_out are written only when the oracle computes the forward
 * (o_in and lse_in NULL), for the rows of the listed q blocks.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bsa.h"
#include "check.h"
#include "slices.h"

// ----------------------------------------------------------------------------
// Argument checks

/* Subset list -> membership flags; n = -1 selects everything. */
static int
mark_subset(const int32_t *list, int n, int limit, const char *name,
            uint8_t *flags)
{
  if (n < 0) {
    memset(flags, 1, (size_t)limit);
    return 0;
  }
  memset(flags, 0, (size_t)limit);
  if (n > 0 && !list)
    return vsa_fail("oracle: %s is NULL with n = %d", name, n);
  for (int t = 0; t < n; t++) {
    if (list[t] < 0 || list[t] >= limit)
      return vsa_fail("oracle: %s[%d] = %d out of range [0, %d)", name, t,
                      (int)list[t], limit);
    flags[list[t]] = 1;
  }
  return 0;
}

/* The lists of one slice: counts in [0, width], indices in [0, nkv). */
static int
check_slice(const vsa_oracle_args *a, int bh, int nq, int nkv)
{
  const int32_t *num = a->q2k_num + (int64_t)bh * nq;
  const int32_t *idx = a->q2k_idx + (int64_t)bh * nq * a->q2k_width;
  vsa_list_error e = {0, bh / a->H, bh % a->H, 0, 0};
  char msg[256];
  for (int i = 0; i < nq; i++) {
    e.row = i;
    if (num[i] < 0 || num[i] > a->q2k_width) {
      e.code = VSA_LIST_COUNT_RANGE;
      e.value = num[i];
      vsa_list_error_format(&e, "q2k_num", "q block", a->q2k_width, msg,
                            (int)sizeof msg);
      return vsa_fail("oracle: %s", msg);
    }
    for (int t = 0; t < num[i]; t++) {
      int32_t j = idx[(int64_t)i * a->q2k_width + t];
      if (j < 0 || j >= nkv) {
        e.code = VSA_LIST_INDEX_RANGE;
        e.value = j;
        vsa_list_error_format(&e, "q2k_idx", "q block", nkv, msg,
                              (int)sizeof msg);
        return vsa_fail("oracle: %s", msg);
      }
    }
  }
  return 0;
}

static int
check_args(const vsa_oracle_args *a, int want_bwd)
{
  if (!a) return vsa_fail("oracle: args is NULL");
  if (a->B <= 0 || a->H <= 0 || a->Sq <= 0 || a->Skv <= 0 || a->D <= 0)
    return vsa_fail("oracle: shape B=%d H=%d Sq=%d Skv=%d D=%d must be "
                    "positive", a->B, a->H, a->Sq, a->Skv, a->D);
  if (!a->q || !a->k || !a->v) return vsa_fail("oracle: q, k, v are required");
  if (!a->q2k_idx || !a->q2k_num || !a->vbs)
    return vsa_fail("oracle: q2k_idx, q2k_num and vbs are required");
  if (a->q2k_width < 0)
    return vsa_fail("oracle: q2k_width must be >= 0, got %d", a->q2k_width);
  if ((a->o_in == NULL) != (a->lse_in == NULL))
    return vsa_fail("oracle: give both o_in and lse_in, or neither");
  if (want_bwd && !a->dO)
    return vsa_fail("oracle: dO is required for dq/dk/dv");
  VSA_TRY(vsa_block_check(a->block, "oracle"));
  if (!vsa_layout_name(a->layout))
    return vsa_fail("oracle: layout %d is not supported (supported: bhsd, "
                    "bshd)", a->layout);
  int nkv = (a->Skv + a->block - 1) / a->block;
  for (int j = 0; j < nkv; j++)
    if (a->vbs[j] < 0 || a->vbs[j] > a->block)
      return vsa_fail("oracle: vbs[%d] = %d out of range [0, %d]", j,
                      (int)a->vbs[j], a->block);
  return 0;
}

// ----------------------------------------------------------------------------
// Helpers

/* Four running sums (d mod 4), added pairwise at the end: independent
 * chains keep the multiply-adds in flight (one sum waits on each add), and
 * the order is still fixed. */
static double
dot(const double *x, const double *y, int D)
{
  double s[4] = {0, 0, 0, 0};
  int d = 0;
  for (; d + 4 <= D; d += 4)
    for (int u = 0; u < 4; u++) s[u] += x[d + u] * y[d + u];
  for (; d < D; d++) s[0] += x[d] * y[d];
  return (s[0] + s[1]) + (s[2] + s[3]);
}

/* y += c·x (each term (c)·x[d], as the formulas write it); y never
 * overlaps x (an output row and an input row), which lets it vectorise. */
static void
add_scaled(double *restrict y, double c, const double *restrict x, int D)
{
  for (int d = 0; d < D; d++) y[d] += c * x[d];
}

/* Zero rows [blk*block, min(S, (blk+1)*block)) of one head's slice whose
 * rows lie ts elements apart (D in BHSD, H·D in BSHD). */
static void
zero_block(double *p, int blk, int block, int S, int D, int64_t ts)
{
  if (!p) return;
  int r0 = blk * block, r1 = r0 + block < S ? r0 + block : S;
  for (int r = r0; r < r1; r++)
    memset(p + (int64_t)r * ts, 0, (size_t)D * sizeof *p);
}

// ----------------------------------------------------------------------------
// Oracle, one (b, h) slice at a time, in two passes over host threads
// (slices.h). Pass A, CHUNK rows of a q block a slice: the rows' forward
// (or the given o, lse), Delta, dq. Pass B, CHUNK kv rows of a produced kv
// block a slice:
// dk and dv, each kv row summed over the rows of the q blocks that select
// its block in ascending order, the plain loop's order. Every output
// element is written by one slice in a fixed order, so the results do not
// depend on the thread count.

enum { ORACLE_OK = 0, ORACLE_OOM, ORACLE_STOP };
enum { CHUNK = 16 }; /* rows a slice (pass B: its K, V rows stay in cache) */

typedef struct {
  const vsa_oracle_args *a;
  int nq, nkv, want_bwd;
  double c; /* sm_scale · log2 e */
  int64_t ts;
  const uint8_t *q_on, *kv_on;
  const double *Q, *K, *V, *dO, *o_in, *lse_in; /* this head's token 0 */
  const int32_t *num, *idx;
  double *dQ, *dK, *dV, *o_out, *lse_out;
  double *row_lse, *row_delta; /* [Sq]: rows of the q blocks pass A visits */
  const int32_t *listed;       /* the produced kv blocks, ascending */
  int n_listed;
  const uint8_t *sel;          /* [n_listed][nq]: q block i selects listed[l] */
} head_ctx;

static int
stop_requested(void)
{
  return vsa_interrupt_flag || vsa_timeout_flag;
}

/* Pass A: rows [i·block + k·CHUNK, +CHUNK) of q block i, slice = i·chunks + k
 * (a spot check produces few q blocks: their rows are the work). */
static int
pass_a(void *ctx, int slice, int *detail)
{
  const head_ctx *h = ctx;
  const vsa_oracle_args *a = h->a;
  const int BLK = a->block, D = a->D, Sq = a->Sq, Skv = a->Skv, nkv = h->nkv;
  const int chunks = (BLK + CHUNK - 1) / CHUNK;
  const int i = slice / chunks, r0 = i * BLK + (slice % chunks) * CHUNK;
  const int64_t ts = h->ts;
  (void)detail;
  if (stop_requested()) return ORACLE_STOP;
  if (r0 >= Sq) return ORACLE_OK;

  uint8_t *mask = calloc((size_t)nkv, 1);
  if (!mask) return ORACLE_OOM;
  for (int t = 0; t < h->num[i]; t++) mask[h->idx[(int64_t)i * a->q2k_width + t]] = 1;
  int feeds_kv = 0;
  for (int j = 0; j < nkv; j++) feeds_kv |= mask[j] && h->kv_on[j];
  if (!h->q_on[i] && !(feeds_kv && h->want_bwd)) {
    free(mask);
    return ORACLE_OK;
  }
  int r1 = (i + 1) * BLK < Sq ? (i + 1) * BLK : Sq;
  if (r0 + CHUNK < r1) r1 = r0 + CHUNK;
  /* A row needed only for dk/dv, with o and lse given: pass B needs only
   * its lse and Delta. */
  if (h->o_in && !h->q_on[i]) {
    for (int r = r0; r < r1; r++) {
      h->row_lse[r] = h->lse_in[r];
      h->row_delta[r] = dot(h->dO + (int64_t)r * ts, h->o_in + (int64_t)r * ts, D);
    }
    free(mask);
    return ORACLE_OK;
  }

  int32_t *keys = malloc((size_t)Skv * sizeof *keys);
  double *x = malloc((size_t)Skv * sizeof *x);
  double *orow = malloc((size_t)D * sizeof *orow);
  if (!keys || !x || !orow) {
    free(mask); free(keys); free(x); free(orow);
    return ORACLE_OOM;
  }
  /* Every valid key of the selected kv blocks. */
  int nk = 0;
  for (int j = 0; j < nkv; j++) {
    if (!mask[j]) continue;
    for (int t = 0; t < a->vbs[j] && j * BLK + t < Skv; t++) keys[nk++] = j * BLK + t;
  }
  for (int r = r0; r < r1; r++) {
    if (stop_requested()) { /* a row may span millions of keys */
      free(mask); free(keys); free(x); free(orow);
      return ORACLE_STOP;
    }
    const double *q = h->Q + (int64_t)r * ts;
    for (int t = 0; t < nk; t++) x[t] = dot(q, h->K + (int64_t)keys[t] * ts, D) * h->c;

    const double *o;
    double lse;
    if (h->o_in) {
      o = h->o_in + (int64_t)r * ts;
      lse = h->lse_in[r];
    } else {
      memset(orow, 0, (size_t)D * sizeof *orow);
      lse = VSA_LSE_EMPTY;
      if (nk > 0) {
        double m = -INFINITY, sum = 0;
        for (int t = 0; t < nk; t++) m = x[t] > m ? x[t] : m;
        for (int t = 0; t < nk; t++) sum += exp2(x[t] - m);
        lse = m + log2(sum);
        for (int t = 0; t < nk; t++) {
          double p = exp2(x[t] - lse);
          const double *vc = h->V + (int64_t)keys[t] * ts;
          for (int d = 0; d < D; d++) orow[d] += p * vc[d];
        }
      }
      o = orow;
      if (h->q_on[i] && h->o_out) memcpy(h->o_out + (int64_t)r * ts, orow, (size_t)D * sizeof *orow);
      if (h->q_on[i] && h->lse_out) h->lse_out[r] = lse;
    }
    if (!h->want_bwd) continue;

    const double *g = h->dO + (int64_t)r * ts;
    const double delta = dot(g, o, D);
    h->row_lse[r] = lse;
    h->row_delta[r] = delta;
    double *dqr = h->dQ && h->q_on[i] ? h->dQ + (int64_t)r * ts : NULL;
    if (!dqr) continue;
    for (int t = 0; t < nk; t++) {
      const double *kr = h->K + (int64_t)keys[t] * ts, *vr = h->V + (int64_t)keys[t] * ts;
      double p = exp2(x[t] - lse);
      double ds = p * (dot(g, vr, D) - delta);
      add_scaled(dqr, a->sm_scale * ds, kr, D);
    }
  }
  free(mask); free(keys); free(x); free(orow);
  return ORACLE_OK;
}

/* Pass B: kv rows [c0, c1) of listed kv block slice / chunks. */
static int
pass_b(void *ctx, int slice, int *detail)
{
  const head_ctx *h = ctx;
  const vsa_oracle_args *a = h->a;
  const int BLK = a->block, D = a->D, Sq = a->Sq, Skv = a->Skv;
  const int chunks = (BLK + CHUNK - 1) / CHUNK;
  const int l = slice / chunks, j = h->listed[l];
  const int64_t ts = h->ts;
  (void)detail;
  int c0 = j * BLK + (slice % chunks) * CHUNK, c1 = c0 + CHUNK;
  const int end = j * BLK + a->vbs[j] < Skv ? j * BLK + a->vbs[j] : Skv;
  if (c1 > end) c1 = end;
  const uint8_t *sel = h->sel + (int64_t)l * h->nq;
  for (int i = 0; i < h->nq && c0 < c1; i++) {
    if (!sel[i]) continue;
    if (stop_requested()) return ORACLE_STOP;
    const int r1 = (i + 1) * BLK < Sq ? (i + 1) * BLK : Sq;
    for (int r = i * BLK; r < r1; r++) {
      const double *q = h->Q + (int64_t)r * ts, *g = h->dO + (int64_t)r * ts;
      const double lse = h->row_lse[r], delta = h->row_delta[r];
      for (int kc = c0; kc < c1; kc++) {
        const double *kr = h->K + (int64_t)kc * ts, *vr = h->V + (int64_t)kc * ts;
        double x = dot(q, kr, D) * h->c;
        double p = exp2(x - lse);
        double ds = p * (dot(g, vr, D) - delta);
        if (h->dK) add_scaled(h->dK + (int64_t)kc * ts, a->sm_scale * ds, q, D);
        if (h->dV) add_scaled(h->dV + (int64_t)kc * ts, p, g, D);
      }
    }
  }
  return ORACLE_OK;
}

/* Records a pass's failure (on the caller's thread: the error slot is
 * thread-local) and returns -1; 0 when it succeeded. */
static int
pass_failed(int rc, int Skv)
{
  if (rc == ORACLE_OK) return 0;
  if (rc == ORACLE_STOP) {
    if (vsa_poll_stop() != 0) return -1;
    return vsa_fail("oracle: stopped");
  }
  return vsa_fail("oracle: out of host memory (Skv %d)", Skv);
}

int
vsa_oracle(const vsa_oracle_args *a, double *o_out, double *lse_out,
           double *dq, double *dk, double *dv)
{
  int want_bwd = dq || dk || dv;
  VSA_TRY(check_args(a, want_bwd));
  const int B = a->B, H = a->H, Sq = a->Sq, Skv = a->Skv, D = a->D;
  const int BLK = a->block;
  const int nq = (Sq + BLK - 1) / BLK;
  const int nkv = (Skv + BLK - 1) / BLK;
  const int64_t ts = vsa_token_stride(a->layout, H, D);
  const int threads = vsa_host_threads();

  uint8_t *bh_on = malloc((size_t)B * H);
  uint8_t *q_on = malloc((size_t)nq);
  uint8_t *kv_on = malloc((size_t)nkv);
  int32_t *listed = malloc((size_t)nkv * sizeof *listed);
  int32_t *slot = malloc((size_t)nkv * sizeof *slot);
  double *row_lse = malloc((size_t)Sq * sizeof *row_lse);
  double *row_delta = malloc((size_t)Sq * sizeof *row_delta);
  uint8_t *sel = NULL;
  int rc = -1;
  if (!bh_on || !q_on || !kv_on || !listed || !slot || !row_lse || !row_delta) {
    vsa_fail("oracle: out of host memory (Skv %d)", Skv);
    goto done;
  }
  if (mark_subset(a->bh_list, a->n_bh, B * H, "bh_list", bh_on) ||
      mark_subset(a->q_blocks, a->n_q_blocks, nq, "q_blocks", q_on) ||
      mark_subset(a->kv_blocks, a->n_kv_blocks, nkv, "kv_blocks", kv_on))
    goto done;
  int n_listed = 0;
  for (int j = 0; j < nkv; j++) slot[j] = kv_on[j] ? n_listed++ : -1;
  for (int j = 0; j < nkv; j++)
    if (kv_on[j]) listed[slot[j]] = j;
  if (want_bwd && (dk || dv) && n_listed > 0) {
    sel = malloc((size_t)n_listed * nq);
    if (!sel) {
      vsa_fail("oracle: out of host memory (%d kv blocks x %d q blocks)", n_listed, nq);
      goto done;
    }
  }

  for (int bh = 0; bh < B * H; bh++) {
    if (!bh_on[bh]) continue;
    if (check_slice(a, bh, nq, nkv)) goto done;
    /* Element offsets of this head's token 0; lse rows stay [B,H,Sq]. */
    const int64_t qoff = vsa_head_offset(a->layout, H, Sq, D, bh);
    const int64_t koff = vsa_head_offset(a->layout, H, Skv, D, bh);
    const int64_t loff = (int64_t)bh * Sq;
    head_ctx h = {a, nq, nkv, want_bwd, a->sm_scale * VSA_LOG2E, ts, q_on, kv_on,
                  a->q + qoff, a->k + koff, a->v + koff, a->dO ? a->dO + qoff : NULL,
                  a->o_in ? a->o_in + qoff : NULL, a->lse_in ? a->lse_in + loff : NULL,
                  a->q2k_num + (int64_t)bh * nq,
                  a->q2k_idx + (int64_t)bh * nq * a->q2k_width,
                  dq ? dq + qoff : NULL, dk ? dk + koff : NULL, dv ? dv + koff : NULL,
                  o_out ? o_out + qoff : NULL, lse_out ? lse_out + loff : NULL,
                  row_lse, row_delta, listed, n_listed, sel};

    /* Produced rows start from zero: they are sums. */
    for (int i = 0; i < nq; i++)
      if (q_on[i]) zero_block(h.dQ, i, BLK, Sq, D, ts);
    for (int j = 0; j < nkv; j++)
      if (kv_on[j]) {
        zero_block(h.dK, j, BLK, Skv, D, ts);
        zero_block(h.dV, j, BLK, Skv, D, ts);
      }
    int es, ed;
    const int chunks = (BLK + CHUNK - 1) / CHUNK;
    if (pass_failed(vsa_run_slices(nq * chunks, threads, pass_a, &h, &es, &ed), Skv)) goto done;
    if (!sel) continue;
    /* Which q blocks select each produced kv block (repeats count once). */
    memset(sel, 0, (size_t)n_listed * nq);
    for (int i = 0; i < nq; i++)
      for (int t = 0; t < h.num[i]; t++) {
        int j = h.idx[(int64_t)i * a->q2k_width + t];
        if (kv_on[j]) sel[(int64_t)slot[j] * nq + i] = 1;
      }
    if (pass_failed(vsa_run_slices(n_listed * chunks, threads, pass_b, &h, &es, &ed), Skv))
      goto done;
  }
  rc = 0;

done:
  free(bh_on);
  free(q_on);
  free(kv_on);
  free(listed);
  free(slot);
  free(row_lse);
  free(row_delta);
  free(sel);
  return rc;
}
