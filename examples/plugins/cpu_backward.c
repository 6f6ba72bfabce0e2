/* cpu_backward.c — an example vsalab plug-in: the block-sparse attention
 * backward on the CPU, in plain C against include/vsalab_plugin.h alone.
 *
 * Build (CMake does it: build/libvsalab_example_cpu.so):
 *   cc -O2 -shared -fPIC -I src examples/plugins/cpu_backward.c -o libmine.so -lm
 * Use:
 *   build/vsalab run experiments/smoke.lua plugin=build/libvsalab_example_cpu.so
 *   vsalab.backends.load{path = "build/libvsalab_example_cpu.so",
 *                        name = "example"}
 *
 * Exports, besides vsalab_plugin_abi (VSALAB_PLUGIN_DEFINE below):
 *   vsalab_backward           the backward, under the default symbol (fp32
 *                             accumulation, one pass over each q block's
 *                             canonical kv list)
 *   example_input_writer      writes into its input v (the tests check that
 *                             it fails its check)
 *   example_failing_backward  always returns an error (the tests use it to
 *                             prove that a failing plug-in fails its point)
 *   example_unscaled_backward forgets sm_scale on dk (the tests use it to
 *                             prove that the oracle catches a wrong plug-in)
 *   example_overrun_backward  writes one element past dv and one before dq
 *                             (the tests use it to prove the guard zones)
 *   example_late_overrun_backward  well-behaved on its first call, then
 *                             writes one element past dk on every later one
 *                             (the timed calls: the tests prove those are
 *                             checked too)
 * Pointers are host pointers: the library declares VSALAB_PLUGIN_CPU only,
 * so vsalab never hands it CUDA tensors. It takes both block sizes and both
 * token layouts (VSALAB_PLUGIN_DEFINE_SHAPES): rows are found through the
 * tensors' strides, so [B,H,S,D] and [B,S,H,D] differ only in which
 * stride steps the head and which the token.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vsalab_plugin.h"

VSALAB_PLUGIN_DEFINE_SHAPES(VSALAB_PLUGIN_CPU, 0, VSALAB_PLUGIN_BLOCK_64 | VSALAB_PLUGIN_BLOCK_128,
                            VSALAB_PLUGIN_LAYOUT_BHSD | VSALAB_PLUGIN_LAYOUT_BSHD)

/* Element offset of token t of head h of batch b in x, one of q, k, v, o,
 * dO, dq, dk, dv: [B,H,S,D] or, in BSHD, [B,S,H,D]. */
static int64_t
row(const vsalab_plugin_args *a, const vsalab_plugin_tensor *x, int64_t b, int64_t h, int64_t t)
{
  if (a->layout == VSALAB_PLUGIN_BSHD) return b * x->stride[0] + t * x->stride[1] + h * x->stride[2];
  return b * x->stride[0] + h * x->stride[1] + t * x->stride[2];
}

static float
bf16_to_f32(uint16_t h)
{
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

static uint16_t
f32_to_bf16(float f) /* round to nearest even, NaN kept */
{
  uint32_t u;
  memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1);
  return (uint16_t)(u >> 16);
}

static int
backward(const vsalab_plugin_args *a, char *err, size_t err_len, float dk_scale)
{
  if (a->abi_version != VSALAB_PLUGIN_ABI_VERSION || a->device != -1) {
    snprintf(err, err_len, "example: expected ABI %d on the CPU, got ABI %u on device %d",
             VSALAB_PLUGIN_ABI_VERSION, a->abi_version, a->device);
    return VSALAB_PLUGIN_E_UNSUPPORTED;
  }
  const int64_t Sq = a->Sq, Skv = a->Skv, D = a->D, nq = a->nq, nkv = a->nkv, bs = a->block;
  const int64_t qw = a->q2k_idx.shape[3]; /* list width */
  const float c = a->sm_scale * 1.4426950408889634f; /* scale * log2(e) */
  float *dq = calloc((size_t)(Sq * D), 4), *dk = calloc((size_t)(Skv * D), 4);
  float *dv = calloc((size_t)(Skv * D), 4), *delta = malloc((size_t)Sq * 4);
  float *qi = malloc((size_t)D * 4), *doi = malloc((size_t)D * 4);
  if (!dq || !dk || !dv || !delta || !qi || !doi) {
    free(dq), free(dk), free(dv), free(delta), free(qi), free(doi);
    snprintf(err, err_len, "example: out of host memory");
    return VSALAB_PLUGIN_E_INTERNAL;
  }
  const int32_t *vbs = a->variable_block_sizes.data;
  /* Row t of head (b, h) of tensor x, as a bf16 pointer. */
#define ROW(x, t) ((uint16_t *)a->x.data + row(a, &a->x, b, h, (t)))
  for (int64_t bh = 0; bh < (int64_t)a->B * a->H; bh++) {
    const int64_t b = bh / a->H, h = bh % a->H;
    const float *lse = (const float *)a->lse.data + bh * Sq;
    const int32_t *idx = (const int32_t *)a->q2k_idx.data + bh * nq * qw;
    const int32_t *num = (const int32_t *)a->q2k_num.data + bh * nq;
    memset(dq, 0, (size_t)(Sq * D) * 4);
    memset(dk, 0, (size_t)(Skv * D) * 4);
    memset(dv, 0, (size_t)(Skv * D) * 4);
    for (int64_t i = 0; i < Sq; i++) {
      float s = 0;
      const uint16_t *dOi = ROW(dO, i), *oi = ROW(o, i);
      for (int64_t d = 0; d < D; d++) s += bf16_to_f32(dOi[d]) * bf16_to_f32(oi[d]);
      delta[i] = s;
    }
    for (int64_t qb = 0; qb < nq; qb++) {
      for (int32_t e = 0; e < num[qb]; e++) {
        int32_t kb = idx[qb * qw + e];
        if (kb < 0 || kb >= nkv) continue; /* never happens with canonical lists */
        int valid = vbs[kb] < 0 ? 0 : vbs[kb] > bs ? (int)bs : vbs[kb];
        for (int64_t i = qb * bs; i < qb * bs + bs; i++) {
          const uint16_t *qr = ROW(q, i), *dOr = ROW(dO, i);
          for (int64_t d = 0; d < D; d++) {
            qi[d] = bf16_to_f32(qr[d]);
            doi[d] = bf16_to_f32(dOr[d]);
          }
          for (int t = 0; t < valid; t++) {
            int64_t j = (int64_t)kb * bs + t;
            const uint16_t *kj = ROW(k, j), *vj = ROW(v, j);
            float s = 0, dp = 0;
            for (int64_t d = 0; d < D; d++) {
              s += qi[d] * bf16_to_f32(kj[d]);
              dp += doi[d] * bf16_to_f32(vj[d]);
            }
            float p = exp2f(s * c - lse[i]);
            float ds = p * (dp - delta[i]);
            for (int64_t d = 0; d < D; d++) {
              dv[j * D + d] += p * doi[d];
              dk[j * D + d] += ds * qi[d] * dk_scale;
              dq[i * D + d] += ds * bf16_to_f32(kj[d]) * a->sm_scale;
            }
          }
        }
      }
    }
    for (int64_t i = 0; i < Sq; i++)
      for (int64_t d = 0; d < D; d++) ROW(dq, i)[d] = f32_to_bf16(dq[i * D + d]);
    for (int64_t j = 0; j < Skv; j++)
      for (int64_t d = 0; d < D; d++) {
        ROW(dk, j)[d] = f32_to_bf16(dk[j * D + d]);
        ROW(dv, j)[d] = f32_to_bf16(dv[j * D + d]);
      }
  }
#undef ROW
  free(dq), free(dk), free(dv), free(delta), free(qi), free(doi);
  return 0;
}

VSALAB_PLUGIN_EXPORT int
vsalab_backward(const vsalab_plugin_args *a, char *err, size_t err_len)
{
  return backward(a, err, err_len, a->sm_scale);
}

VSALAB_PLUGIN_EXPORT int
example_unscaled_backward(const vsalab_plugin_args *a, char *err, size_t err_len)
{
  return backward(a, err, err_len, 1.0f);
}

/* A bad citizen for the tests: overwrites v with 1.0, then computes a correct
 * backward of those changed inputs. vsalab computes its reference before any
 * backward runs, so this fails its check instead of moving the reference. */
VSALAB_PLUGIN_EXPORT int
example_input_writer(const vsalab_plugin_args *a, char *err, size_t err_len)
{
  uint16_t *v = (uint16_t *)a->v.data;
  int64_t n = a->v.shape[0] * a->v.shape[1] * a->v.shape[2] * a->v.shape[3];
  for (int64_t i = 0; i < n; i++) v[i] = 0x3F80; /* bf16 1.0 */
  return backward(a, err, err_len, a->sm_scale);
}

VSALAB_PLUGIN_EXPORT int
example_failing_backward(const vsalab_plugin_args *a, char *err, size_t err_len)
{
  snprintf(err, err_len, "example: refused on purpose (B=%d H=%d Sq=%d)", a->B, a->H, a->Sq);
  return VSALAB_PLUGIN_E_INVALID;
}

/* A bad citizen for the tests: a correct backward that also writes one
 * element past the end of dv and one before dq (an off-by-one in a
 * plug-in's loop bounds). vsalab's guard zones fail the point. */
VSALAB_PLUGIN_EXPORT int
example_overrun_backward(const vsalab_plugin_args *a, char *err, size_t err_len)
{
  int rc = backward(a, err, err_len, a->sm_scale);
  int64_t n = a->dv.shape[0] * a->dv.shape[1] * a->dv.shape[2] * a->dv.shape[3];
  ((uint16_t *)a->dv.data)[n] = 0;
  ((uint16_t *)a->dq.data)[-1] = 0;
  return rc;
}

/* Another bad citizen: right on its first call (the checked one), then one
 * element past dk on every later call, as a bug in a timed path alone
 * would. vsalab checks the zones after the timed calls too. (A call count
 * per process: the tests load it once for one point.) */
VSALAB_PLUGIN_EXPORT int
example_late_overrun_backward(const vsalab_plugin_args *a, char *err, size_t err_len)
{
  static int calls;
  int rc = backward(a, err, err_len, a->sm_scale);
  if (calls++ > 0) {
    int64_t n = a->dk.shape[0] * a->dk.shape[1] * a->dk.shape[2] * a->dk.shape[3];
    ((uint16_t *)a->dk.data)[n] = 0;
  }
  return rc;
}
