/* invert_cpu.c — q2k -> k2q list inversion on the host.
 *
 * The plain two-pass transpose that the GPU inversion (kernels/
 * bsa_invert.cu) is checked against: per (b, h) slice, pass 1 validates
 * every q row and counts entries per kv block, pass 2 walks the q rows in
 * ascending order and appends each to its kv blocks' lists, so every k2q
 * row comes out sorted without a sort. k2q_idx rows are padded with -1 over
 * their full width nq. Entries past a row's count are never read.
 *
 * Error positions: this function sees only BH, not H, so a failure is
 * reported with err->b = b*H + h and err->h = -1; the caller, which knows
 * H, splits it (b = bh / H, h = bh % H). vsa_list_error_format prints such
 * an error as "(bh=..., q block=...)". The message recorded with vsa_fail
 * uses that form too.
 */
#include <stdlib.h>

#include "bsa.h"
#include "check.h"

// ----------------------------------------------------------------------------
// Validation of one row

/* Check row i of a slice: count in [0, width], each index in [0, nkv), no
 * index twice. seen[] holds the last row that used each kv block (rows are
 * visited in order, so no clearing is needed within a slice). Returns the
 * error code and fills *value. */
static int
check_row(const int32_t *row, int32_t count, int width, int nkv, int i,
          int32_t *seen, int32_t *value)
{
  if (count < 0 || count > width) {
    *value = count;
    return VSA_LIST_COUNT_RANGE;
  }
  for (int e = 0; e < count; e++) {
    int32_t j = row[e];
    if (j < 0 || j >= nkv) {
      *value = j;
      return VSA_LIST_INDEX_RANGE;
    }
    if (seen[j] == i) {
      *value = j;
      return VSA_LIST_REPEATED;
    }
    seen[j] = i;
  }
  return VSA_LIST_OK;
}

// ----------------------------------------------------------------------------
// Inversion

int
vsa_invert_cpu(const int32_t *q2k_idx, const int32_t *q2k_num, int BH,
               int nq, int width, int nkv, int32_t *k2q_idx,
               int32_t *k2q_num, vsa_list_error *err)
{
  vsa_list_error local;
  if (!err) err = &local;
  err->code = VSA_LIST_OK;
  err->b = err->h = err->row = err->value = 0;

  if (BH <= 0) return vsa_fail("invert: BH must be positive, got %d", BH);
  if (nq <= 0) return vsa_fail("invert: nq must be positive, got %d", nq);
  if (nkv <= 0) return vsa_fail("invert: nkv must be positive, got %d", nkv);
  if (width < 0) return vsa_fail("invert: width must be >= 0, got %d", width);
  if (!q2k_idx || !q2k_num || !k2q_idx || !k2q_num)
    return vsa_fail("invert: list pointers are required");

  int32_t *seen = malloc((size_t)nkv * sizeof *seen);
  if (!seen) return vsa_fail("invert: out of host memory (nkv %d)", nkv);

  for (int bh = 0; bh < BH; bh++) {
    const int32_t *qi = q2k_idx + (int64_t)bh * nq * width;
    const int32_t *qn = q2k_num + (int64_t)bh * nq;
    int32_t *ki = k2q_idx + (int64_t)bh * nkv * nq;
    int32_t *kn = k2q_num + (int64_t)bh * nkv;

    /* Pass 1: validate in row order (the first failure is the one reported)
     * and count entries per kv block. */
    for (int j = 0; j < nkv; j++) {
      seen[j] = -1;
      kn[j] = 0;
    }
    for (int i = 0; i < nq; i++) {
      const int32_t *row = qi + (int64_t)i * width;
      int32_t value = 0;
      int code = check_row(row, qn[i], width, nkv, i, seen, &value);
      if (code != VSA_LIST_OK) {
        err->code = code;
        err->b = bh;
        err->h = -1;
        err->row = i;
        err->value = value;
        char msg[256];
        int count_err = code == VSA_LIST_COUNT_RANGE;
        vsa_list_error_format(err, count_err ? "q2k_num" : "q2k_idx",
                              "q block", count_err ? width : nkv, msg,
                              (int)sizeof msg);
        free(seen);
        return vsa_fail("%s", msg);
      }
      for (int e = 0; e < qn[i]; e++) kn[row[e]]++;
    }

    /* Pass 2: ascending q order falls out of visiting rows in order. kn is
     * rebuilt as the fill cursor and ends equal to the counts again. */
    for (int64_t t = 0; t < (int64_t)nkv * nq; t++) ki[t] = -1;
    for (int j = 0; j < nkv; j++) kn[j] = 0;
    for (int i = 0; i < nq; i++) {
      const int32_t *row = qi + (int64_t)i * width;
      for (int e = 0; e < qn[i]; e++) {
        int32_t j = row[e];
        ki[(int64_t)j * nq + kn[j]++] = i;
      }
    }
  }
  free(seen);
  return 0;
}
