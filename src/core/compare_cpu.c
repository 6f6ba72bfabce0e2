/* compare_cpu.c — host twin of vsa_compare (kernels/compare.cu).
 *
 * Same sums in fp64 over the same pairs, summed sequentially: the GPU
 * version adds partial sums in another order, so the two agree to rounding,
 * not bit for bit. An element that is NaN or Inf is counted on its side and
 * its pair is left out of every sum, so a comparison can never pass because
 * both sides are NaN. A dtype other than bf16/f32/f64 counts every element
 * of its side as non-finite: the check then fails instead of passing empty.
 */
#include <math.h>
#include <string.h>

#include "bsa.h"

// ----------------------------------------------------------------------------
// Element access

static double
load(const void *p, vsa_dtype t, int64_t i)
{
  switch (t) {
  case VSA_BF16: {
    uint32_t bits = (uint32_t)((const uint16_t *)p)[i] << 16;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
  }
  case VSA_F32: return ((const float *)p)[i];
  case VSA_F64: return ((const double *)p)[i];
  default: return NAN;
  }
}

// ----------------------------------------------------------------------------
// Sums

void
vsa_compare_cpu(const void *x, vsa_dtype xt, const void *ref, vsa_dtype rt,
                int64_t n, vsa_compare_sums *s)
{
  /* Sums in blocks of 4096 added into running totals: the rounding error
   * grows with the block count rather than with n, which keeps this twin
   * close to the GPU's tree-shaped sums at 10^8+ elements. */
  double diff2 = 0, ref2 = 0, x2 = 0, max_abs = s->max_abs;
  int64_t bad_x = 0, bad_ref = 0;
  for (int64_t i0 = 0; i0 < n; i0 += 4096) {
    int64_t i1 = n - i0 < 4096 ? n : i0 + 4096;
    double bd = 0, br = 0, bx = 0;
    for (int64_t i = i0; i < i1; i++) {
      double a = load(x, xt, i), r = load(ref, rt, i);
      int fa = isfinite(a), fr = isfinite(r);
      bad_x += !fa;
      bad_ref += !fr;
      if (!fa || !fr) continue;
      double d = a - r;
      bd += d * d;
      br += r * r;
      bx += a * a;
      if (fabs(d) > max_abs) max_abs = fabs(d);
    }
    diff2 += bd;
    ref2 += br;
    x2 += bx;
  }
  s->diff2 += diff2;
  s->ref2 += ref2;
  s->x2 += x2;
  s->max_abs = max_abs;
  s->nonfinite_x += bad_x;
  s->nonfinite_ref += bad_ref;
  s->n += n;
}
