/* bsa_ref_cpu.c — the fp32 reference forward/backward of block-sparse (VSA)
 * attention on the host, as declared in bsa.h.
 *
 * Written to be read, not to be fast: one q row (or one kv row) at a time,
 * scalar fp32 arithmetic from bf16 inputs, loops over the block lists only
 * (never a dense S×S mask). Semantics (bsa.h, tests/CASES.md):
 *   - key slot t of kv block j is valid iff t < vbs[j]; invalid keys are
 *     skipped (P = 0 by selection), so lse values of empty rows (±inf, 0,
 *     VSA_LSE_EMPTY) never reach an exp2 and never make NaN;
 *   - list entries past a row's count are never read;
 *   - a q row with no valid key gets o = 0, lse = VSA_LSE_EMPTY, dq = 0;
 *   - kv blocks no q block selects get dk = dv = 0 exactly;
 *   - every element of every output is written, offsets are int64;
 *   - q, k, v, o, dO and the gradients are in s->layout (BHSD or BSHD): a
 *     head's token t lies at vsa_head_offset + t·vsa_token_stride, so both
 *     layouts run the same arithmetic in the same order (same bits).
 * dk/dv walk the k2q lists (kv block j loops over its q blocks), dq walks the
 * q2k lists (recomputing S and dP): deterministic, no accumulation races.
 *
 * Test: tests/c/test_ref_cpu.c checks it against an fp64 brute force.
 */
#include "bsa.h"
#include "check.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

// ---------------------------------------------------------------------------
// Helpers

/* bf16 -> f32 is exact: the bf16 bits are the high half of the f32 bits. */
static inline float
bf16_to_f32(uint16_t h)
{
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

/* Dot product of two bf16 rows of length D, fp32 accumulation in order. */
static inline float
dot_bf16(const uint16_t *a, const uint16_t *b, int D)
{
  float acc = 0.0f;
  for (int d = 0; d < D; d++) acc += bf16_to_f32(a[d]) * bf16_to_f32(b[d]);
  return acc;
}

/* Number of valid key slots of kv block j: vbs clamped to [0, block]. */
static inline int
valid_keys(const int32_t *vbs, int j, int block)
{
  int n = vbs[j];
  return n < 0 ? 0 : (n > block ? block : n);
}

static int
check_shape(const vsa_shape *s, const char *fn)
{
  if (s->B < 1 || s->H < 1 || s->D < 1 || s->Sq < 0 || s->Skv < 0)
    return vsa_fail("%s: bad shape B=%d H=%d Sq=%d Skv=%d D=%d", fn, s->B,
                    s->H, s->Sq, s->Skv, s->D);
  VSA_TRY(vsa_block_check(s->block, fn));
  if (!vsa_layout_name(s->layout))
    return vsa_fail("%s: layout %d is not supported (supported: bhsd, bshd)",
                    fn, s->layout);
  if (s->Sq % s->block != 0 || s->Skv % s->block != 0)
    return vsa_fail("%s: Sq=%d and Skv=%d must be multiples of the block size %d", fn, s->Sq,
                    s->Skv, s->block);
  return 0;
}

/* Validate the used part of one list direction: counts in [0, width] and
 * indices in [0, range). Entries past a count are not read. */
static int
check_list(const int32_t *idx, const int32_t *num, int64_t rows, int width,
           int range, const char *what)
{
  for (int64_t r = 0; r < rows; r++) {
    int n = num[r];
    if (n < 0 || n > width)
      return vsa_fail("%s: count %d out of range [0, %d] at row %lld", what, n,
                      width, (long long)r);
    for (int e = 0; e < n; e++) {
      int32_t x = idx[r * width + e];
      if (x < 0 || x >= range)
        return vsa_fail("%s: index %d out of range [0, %d) at row %lld", what,
                        (int)x, range, (long long)r);
    }
  }
  return 0;
}

// ---------------------------------------------------------------------------
// Forward

/* For each q row: collect the scaled base-2 logits of its valid keys (list
 * order, then slot order), take max and sum, then o = Σ p v / l. Three plain
 * passes over one row instead of an online softmax: easier to trust. */
int
vsa_forward_ref_cpu(const vsa_shape *s, const uint16_t *q, const uint16_t *k,
                    const uint16_t *v, const int32_t *q2k_idx,
                    const int32_t *q2k_num, int q2k_width, const int32_t *vbs,
                    float *o, float *lse)
{
  VSA_TRY(check_shape(s, "vsa_forward_ref_cpu"));
  const int H = s->H, D = s->D;
  const int BLK = s->block, nq = s->Sq / BLK, nkv = s->Skv / BLK;
  const int64_t BH = (int64_t)s->B * H;
  const int64_t ts = vsa_token_stride(s->layout, H, D);
  VSA_TRY(check_list(q2k_idx, q2k_num, BH * nq, q2k_width, nkv, "q2k"));

  const float scale2 = s->sm_scale * (float)VSA_LOG2E;
  /* Logits of one row: at most width blocks of BLK keys. */
  size_t cap = (size_t)(q2k_width > 0 ? q2k_width : 1) * BLK;
  float *logit = malloc(cap * sizeof *logit);
  float *acc = malloc((size_t)D * sizeof *acc);
  if (!logit || !acc) {
    free(logit);
    free(acc);
    return vsa_fail("vsa_forward_ref_cpu: out of host memory");
  }

  for (int64_t bh = 0; bh < BH; bh++) {
    const int64_t qoff = vsa_head_offset(s->layout, H, s->Sq, D, bh);
    const int64_t koff = vsa_head_offset(s->layout, H, s->Skv, D, bh);
    const uint16_t *qs = q + qoff, *ks = k + koff, *vs = v + koff;
    for (int i = 0; i < nq; i++) {
      /* A stop is looked for every q block: one head of a long sequence
       * runs for many seconds. */
      if (vsa_poll_stop() != 0) {
        free(logit);
        free(acc);
        return -1;
      }
      const int64_t row = bh * nq + i;
      const int32_t *list = q2k_idx + row * q2k_width;
      const int count = q2k_num[row];
      for (int t = 0; t < BLK; t++) {
        const int64_t r = (int64_t)i * BLK + t; /* q row in slice */
        const uint16_t *qr = qs + r * ts;
        float *orow = o + qoff + r * ts;

        /* Pass 1: logits of the valid keys, and their max. */
        int n = 0;
        float m = -INFINITY;
        for (int e = 0; e < count; e++) {
          const int j = list[e], nv = valid_keys(vbs, j, BLK);
          for (int c = 0; c < nv; c++) {
            const int64_t kr = (int64_t)j * BLK + c;
            float x = dot_bf16(qr, ks + kr * ts, D) * scale2;
            logit[n++] = x;
            m = fmaxf(m, x);
          }
        }
        if (n == 0) { /* no valid key: o = 0 by definition */
          for (int d = 0; d < D; d++) orow[d] = 0.0f;
          lse[bh * s->Sq + r] = VSA_LSE_EMPTY;
          continue;
        }

        /* Pass 2 and 3: l = Σ exp2(x − m); o = Σ p v / l, same key order. */
        for (int d = 0; d < D; d++) acc[d] = 0.0f;
        float l = 0.0f;
        n = 0;
        for (int e = 0; e < count; e++) {
          const int j = list[e], nv = valid_keys(vbs, j, BLK);
          for (int c = 0; c < nv; c++) {
            const int64_t kr = (int64_t)j * BLK + c;
            const uint16_t *vr = vs + kr * ts;
            float p = exp2f(logit[n++] - m);
            l += p;
            for (int d = 0; d < D; d++) acc[d] += p * bf16_to_f32(vr[d]);
          }
        }
        for (int d = 0; d < D; d++) orow[d] = acc[d] / l;
        lse[bh * s->Sq + r] = m + log2f(l);
      }
    }
  }
  free(logit);
  free(acc);
  return 0;
}

// ---------------------------------------------------------------------------
// Backward

int
vsa_backward_ref_cpu(const vsa_shape *s, const uint16_t *dO,
                     const uint16_t *q, const uint16_t *k, const uint16_t *v,
                     const uint16_t *o, const float *lse,
                     const int32_t *k2q_idx, const int32_t *k2q_num,
                     int k2q_width, const int32_t *q2k_idx,
                     const int32_t *q2k_num, int q2k_width, const int32_t *vbs,
                     float *dq, float *dk, float *dv, float *delta)
{
  VSA_TRY(check_shape(s, "vsa_backward_ref_cpu"));
  const int H = s->H, D = s->D;
  const int BLK = s->block, nq = s->Sq / BLK, nkv = s->Skv / BLK;
  const int64_t BH = (int64_t)s->B * H;
  VSA_TRY(check_list(q2k_idx, q2k_num, BH * nq, q2k_width, nkv, "q2k"));
  VSA_TRY(check_list(k2q_idx, k2q_num, BH * nkv, k2q_width, nq, "k2q"));
  const int64_t ts = vsa_token_stride(s->layout, H, D);

  const float scale2 = s->sm_scale * (float)VSA_LOG2E;
  float *acc_k = malloc((size_t)D * sizeof *acc_k);
  float *acc_v = malloc((size_t)D * sizeof *acc_v);
  if (!acc_k || !acc_v) {
    free(acc_k);
    free(acc_v);
    return vsa_fail("vsa_backward_ref_cpu: out of host memory");
  }

  /* Delta[r] = Σ_d dO[r][d]·o[r][d] for every q row (empty rows too);
   * Delta is [B,H,Sq] in both layouts. */
  for (int64_t bh = 0; bh < BH; bh++) {
    const int64_t off = vsa_head_offset(s->layout, H, s->Sq, D, bh);
    for (int64_t r = 0; r < s->Sq; r++)
      delta[bh * s->Sq + r] = dot_bf16(dO + off + r * ts, o + off + r * ts, D);
  }

  int rc = 0;
  for (int64_t bh = 0; bh < BH; bh++) {
    const int64_t qoff = vsa_head_offset(s->layout, H, s->Sq, D, bh);
    const int64_t koff = vsa_head_offset(s->layout, H, s->Skv, D, bh);
    const uint16_t *qs = q + qoff, *dOs = dO + qoff;
    const uint16_t *ks = k + koff, *vs = v + koff;
    const float *lses = lse + bh * s->Sq, *deltas = delta + bh * s->Sq;

    /* dk, dv: one kv row c at a time, over the q blocks that select its
     * block (k2q list). Invalid slots and unselected blocks stay 0. */
    for (int j = 0; j < nkv; j++) {
      /* A stop is looked for every kv block (and every q block below): one
       * head of a long sequence runs for many seconds. */
      if (vsa_poll_stop() != 0) {
        rc = -1;
        goto done;
      }
      const int64_t row = bh * nkv + j;
      const int32_t *list = k2q_idx + row * k2q_width;
      const int count = k2q_num[row], nv = valid_keys(vbs, j, BLK);
      for (int c = 0; c < BLK; c++) {
        const int64_t kr = (int64_t)j * BLK + c;
        for (int d = 0; d < D; d++) acc_k[d] = acc_v[d] = 0.0f;
        if (c < nv) {
          const uint16_t *kc = ks + kr * ts, *vc = vs + kr * ts;
          for (int e = 0; e < count; e++) {
            const int i = list[e];
            for (int t = 0; t < BLK; t++) {
              const int64_t r = (int64_t)i * BLK + t;
              const uint16_t *qr = qs + r * ts, *dOr = dOs + r * ts;
              float p = exp2f(dot_bf16(qr, kc, D) * scale2 - lses[r]);
              float dp = dot_bf16(dOr, vc, D);
              float ds = p * (dp - deltas[r]);
              for (int d = 0; d < D; d++) {
                acc_v[d] += p * bf16_to_f32(dOr[d]);
                acc_k[d] += ds * bf16_to_f32(qr[d]);
              }
            }
          }
        }
        float *dkr = dk + koff + kr * ts, *dvr = dv + koff + kr * ts;
        for (int d = 0; d < D; d++) {
          dkr[d] = s->sm_scale * acc_k[d];
          dvr[d] = acc_v[d];
        }
      }
    }

    /* dq: one q row r at a time, over its valid keys (q2k list), with S,
     * P and dP recomputed. A row with no valid key keeps dq = 0. */
    for (int i = 0; i < nq; i++) {
      if (vsa_poll_stop() != 0) {
        rc = -1;
        goto done;
      }
      const int64_t row = bh * nq + i;
      const int32_t *list = q2k_idx + row * q2k_width;
      const int count = q2k_num[row];
      for (int t = 0; t < BLK; t++) {
        const int64_t r = (int64_t)i * BLK + t;
        const uint16_t *qr = qs + r * ts, *dOr = dOs + r * ts;
        for (int d = 0; d < D; d++) acc_k[d] = 0.0f;
        for (int e = 0; e < count; e++) {
          const int j = list[e], nv = valid_keys(vbs, j, BLK);
          for (int c = 0; c < nv; c++) {
            const int64_t kr = (int64_t)j * BLK + c;
            const uint16_t *kc = ks + kr * ts, *vc = vs + kr * ts;
            float p = exp2f(dot_bf16(qr, kc, D) * scale2 - lses[r]);
            float ds = p * (dot_bf16(dOr, vc, D) - deltas[r]);
            for (int d = 0; d < D; d++) acc_k[d] += ds * bf16_to_f32(kc[d]);
          }
        }
        float *dqr = dq + qoff + r * ts;
        for (int d = 0; d < D; d++) dqr[d] = s->sm_scale * acc_k[d];
      }
    }
  }
done:
  free(acc_k);
  free(acc_v);
  return rc;
}
