/* test_invert.c — vsa_invert_cpu against a brute-force transpose, and the
 * list-error reports (codes, positions, message text).
 *
 * Build and run (from the repository root):
 *   gcc -std=c11 -O2 -Wall -Wextra -I src/core -I src/storage tests/c/test_invert.c \
 *     src/core/invert_cpu.c src/core/list_check.c src/core/check.c \
 *     -I/usr/local/cuda/include -L/usr/local/cuda/lib64 -lcudart_static \
 *     -ldl -lpthread -lrt -lm -o /tmp/test_invert && /tmp/test_invert
 */
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
// Test data

static uint64_t rng_state;

static uint32_t
rnd(void)
{
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return (uint32_t)(rng_state >> 11);
}

enum { TAIL_MINUS1, TAIL_INTMAX, TAIL_GARBAGE, TAIL_ZERO };

/* Random distinct lists; ragged counts (0 included); tails per `tail`. */
static void
make_lists(int BH, int nq, int nkv, int width, int maxcount, int tail,
           int32_t *idx, int32_t *num)
{
  int32_t *perm = malloc((size_t)nkv * sizeof *perm);
  for (int64_t r = 0; r < (int64_t)BH * nq; r++) {
    for (int j = 0; j < nkv; j++) perm[j] = j;
    int count = (int)(rnd() % (uint32_t)(maxcount + 1));
    if (r % 7 == 3) count = 0;
    for (int k = 0; k < count; k++) {
      int j = k + (int)(rnd() % (uint32_t)(nkv - k));
      int32_t t = perm[k];
      perm[k] = perm[j];
      perm[j] = t;
      idx[r * width + k] = perm[k];
    }
    for (int k = count; k < width; k++) {
      int32_t v = -1;
      if (tail == TAIL_INTMAX) v = INT32_MAX;
      if (tail == TAIL_GARBAGE) v = (int32_t)(rnd() - (1u << 20));
      if (tail == TAIL_ZERO) v = 0;
      idx[r * width + k] = v;
    }
    num[r] = count;
  }
  free(perm);
}

/* The obvious O(nq·nkv·width) transpose: for each kv block, scan the q rows
 * in order and test membership. */
static void
brute_transpose(const int32_t *idx, const int32_t *num, int BH, int nq,
                int width, int nkv, int32_t *kidx, int32_t *knum)
{
  for (int bh = 0; bh < BH; bh++)
    for (int j = 0; j < nkv; j++) {
      int32_t *out = kidx + ((int64_t)bh * nkv + j) * nq;
      int n = 0;
      for (int i = 0; i < nq; i++) {
        int64_t r = (int64_t)bh * nq + i;
        for (int e = 0; e < num[r]; e++)
          if (idx[r * width + e] == j) {
            out[n++] = i;
            break;
          }
      }
      for (int t = n; t < nq; t++) out[t] = -1;
      knum[(int64_t)bh * nkv + j] = n;
    }
}

// ----------------------------------------------------------------------------
// Inversion against the brute force

static void
test_random(int BH, int nq, int nkv, int width, int maxcount, int tail,
            uint64_t seed)
{
  rng_state = seed;
  size_t nidx = (size_t)BH * nq * width, nout = (size_t)BH * nkv * nq;
  int32_t *idx = malloc(nidx * 4), *num = malloc((size_t)BH * nq * 4);
  int32_t *kidx = malloc(nout * 4), *knum = malloc((size_t)BH * nkv * 4);
  int32_t *bidx = malloc(nout * 4), *bnum = malloc((size_t)BH * nkv * 4);
  make_lists(BH, nq, nkv, width, maxcount, tail, idx, num);
  memset(kidx, 0x5a, nout * 4); /* poison: every slot must be written */
  memset(knum, 0x5a, (size_t)BH * nkv * 4);
  brute_transpose(idx, num, BH, nq, width, nkv, bidx, bnum);
  vsa_list_error err;
  int rc = vsa_invert_cpu(idx, num, BH, nq, width, nkv, kidx, knum, &err);
  int same = rc == 0 && memcmp(kidx, bidx, nout * 4) == 0 &&
             memcmp(knum, bnum, (size_t)BH * nkv * 4) == 0;
  CHECK(same && err.code == 0,
        "invert BH=%d nq=%d nkv=%d width=%d maxcount=%d tail=%d seed=%llu "
        "matches brute force", BH, nq, nkv, width, maxcount, tail,
        (unsigned long long)seed);

  /* The other way round: k2q -> q2k gives each q row's set, sorted. */
  int32_t *qidx = malloc((size_t)BH * nq * nkv * 4);
  int32_t *qnum = malloc((size_t)BH * nq * 4);
  rc = vsa_invert_cpu(kidx, knum, BH, nkv, nq, nq, qidx, qnum, &err);
  int round = rc == 0;
  for (int64_t r = 0; round && r < (int64_t)BH * nq; r++) {
    round = qnum[r] == num[r];
    for (int e = 0; round && e < num[r]; e++) {
      /* qidx row is sorted; every original entry must be in it. */
      int found = 0;
      for (int t = 0; t < qnum[r]; t++)
        found |= qidx[r * nkv + t] == idx[r * width + e];
      round = found && (e == 0 || qidx[r * nkv + e] > qidx[r * nkv + e - 1]);
    }
  }
  CHECK(round, "  round trip q2k -> k2q -> q2k gives the sorted lists");
  free(qidx);
  free(qnum);
  free(idx);
  free(num);
  free(kidx);
  free(knum);
  free(bidx);
  free(bnum);
}

static void
test_tails_identical(void)
{
  int BH = 4, nq = 9, nkv = 11, width = 15;
  size_t nout = (size_t)BH * nkv * nq;
  int32_t *ref = NULL;
  int all_same = 1;
  for (int tail = TAIL_MINUS1; tail <= TAIL_ZERO; tail++) {
    rng_state = 77;
    int32_t *idx = malloc((size_t)BH * nq * width * 4);
    int32_t *num = malloc((size_t)BH * nq * 4);
    int32_t *kidx = malloc(nout * 4), *knum = malloc((size_t)BH * nkv * 4);
    make_lists(BH, nq, nkv, width, 6, TAIL_MINUS1, idx, num);
    /* Same lists, only the tails differ (filled after drawing them). */
    for (int r = 0; r < BH * nq; r++)
      for (int k = num[r]; k < width; k++)
        idx[r * width + k] = tail == TAIL_INTMAX    ? INT32_MAX
                             : tail == TAIL_ZERO    ? 0
                             : tail == TAIL_GARBAGE ? (int32_t)rnd()
                                                    : -1;
    vsa_list_error err;
    int rc = vsa_invert_cpu(idx, num, BH, nq, width, nkv, kidx, knum, &err);
    if (rc) all_same = 0;
    if (!ref) ref = kidx;
    else {
      all_same &= memcmp(ref, kidx, nout * 4) == 0;
      free(kidx);
    }
    free(idx);
    free(num);
    free(knum);
  }
  free(ref);
  CHECK(all_same, "tails -1 / INT32_MAX / garbage / 0 give identical k2q");
}

static void
test_count_zero_head(void)
{
  int BH = 2, nq = 4, nkv = 3, width = 3;
  int32_t idx[2 * 4 * 3], num[8] = {0, 0, 0, 0, 3, 1, 0, 2};
  for (int t = 0; t < 24; t++) idx[t] = 12345;
  int32_t r1[] = {2, 0, 1}, r2[] = {1}, r4[] = {1, 0};
  memcpy(idx + 4 * 3, r1, sizeof r1);
  memcpy(idx + 5 * 3, r2, sizeof r2);
  memcpy(idx + 7 * 3, r4, sizeof r4);
  int32_t kidx[2 * 3 * 4], knum[6];
  vsa_list_error err;
  int rc = vsa_invert_cpu(idx, num, BH, nq, width, nkv, kidx, knum, &err);
  int32_t want_idx[24] = {-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
                          0,  3,  -1, -1, 0,  1,  3,  -1, 0,  -1, -1, -1};
  int32_t want_num[6] = {0, 0, 0, 2, 3, 1};
  CHECK(rc == 0 && !memcmp(kidx, want_idx, sizeof want_idx) &&
            !memcmp(knum, want_num, sizeof want_num),
        "hand case: a head with all counts 0, garbage tails, ascending order");
}

// ----------------------------------------------------------------------------
// Errors

/* Valid lists for BH = 6 (B=2, H=3), nq = 5, nkv = 8, width = 8. */
#define EB 6
#define ENQ 5
#define ENKV 8
#define EW 8

static void
valid_lists(int32_t *idx, int32_t *num)
{
  rng_state = 4242;
  make_lists(EB, ENQ, ENKV, EW, 6, TAIL_GARBAGE, idx, num);
  for (int r = 0; r < EB * ENQ; r++)
    if (num[r] < 3) { /* rows the tests below edit need 3 entries */
      num[r] = 3;
      idx[r * EW + 0] = 0;
      idx[r * EW + 1] = 2;
      idx[r * EW + 2] = 4;
    }
}

static void
expect_error(const char *name, int32_t *idx, int32_t *num, int code, int bh,
             int row, int value, const char *msg)
{
  int32_t kidx[EB * ENKV * ENQ], knum[EB * ENKV];
  vsa_list_error err;
  memset(&err, 0x7f, sizeof err);
  int rc = vsa_invert_cpu(idx, num, EB, ENQ, EW, ENKV, kidx, knum, &err);
  CHECK(rc == -1 && err.code == code && err.b == bh && err.h == -1 &&
            err.row == row && err.value == value,
        "%s: code %d at (bh=%d, row=%d) value %d (got rc %d code %d bh %d "
        "h %d row %d value %d)", name, code, bh, row, value, rc,
        (int)err.code, (int)err.b, (int)err.h, (int)err.row, (int)err.value);
  CHECK(strcmp(vsa_last_error(), msg) == 0, "  message \"%s\" (got \"%s\")",
        msg, vsa_last_error());
}

static void
test_errors(void)
{
  int32_t idx[EB * ENQ * EW], num[EB * ENQ];

  valid_lists(idx, num);
  int32_t kidx[EB * ENKV * ENQ], knum[EB * ENKV];
  vsa_list_error err;
  CHECK(vsa_invert_cpu(idx, num, EB, ENQ, EW, ENKV, kidx, knum, &err) == 0 &&
            err.code == 0,
        "valid lists (one kv block in many rows) pass");

  valid_lists(idx, num);
  idx[(4 * ENQ + 3) * EW + 1] = 99;
  expect_error("index too large", idx, num, VSA_LIST_INDEX_RANGE, 4, 3, 99,
               "q2k_idx: index 99 out of range [0, 8) at (bh=4, q block=3)");

  valid_lists(idx, num);
  idx[(0 * ENQ + 2) * EW + 0] = -1;
  expect_error("index negative", idx, num, VSA_LIST_INDEX_RANGE, 0, 2, -1,
               "q2k_idx: index -1 out of range [0, 8) at (bh=0, q block=2)");

  valid_lists(idx, num);
  num[0 * ENQ + 2] = 9;
  expect_error("count too large", idx, num, VSA_LIST_COUNT_RANGE, 0, 2, 9,
               "q2k_num: count 9 out of range [0, 8] at (bh=0, q block=2)");

  valid_lists(idx, num);
  num[5 * ENQ + 4] = -3;
  expect_error("count negative", idx, num, VSA_LIST_COUNT_RANGE, 5, 4, -3,
               "q2k_num: count -3 out of range [0, 8] at (bh=5, q block=4)");

  valid_lists(idx, num);
  idx[(1 * ENQ + 1) * EW + 0] = 5;
  idx[(1 * ENQ + 1) * EW + 2] = 5;
  expect_error("repeat", idx, num, VSA_LIST_REPEATED, 1, 1, 5,
               "q2k_idx: kv block 5 repeated at (bh=1, q block=1)");

  /* Two faults: the first in (bh, row) order wins. */
  valid_lists(idx, num);
  idx[(3 * ENQ + 0) * EW + 0] = 8;
  num[2 * ENQ + 4] = 100;
  expect_error("first of two", idx, num, VSA_LIST_COUNT_RANGE, 2, 4, 100,
               "q2k_num: count 100 out of range [0, 8] at (bh=2, q block=4)");

  /* Garbage past the count, including repeats and out-of-range values. */
  valid_lists(idx, num);
  num[7] = 2;
  idx[7 * EW + 2] = idx[7 * EW + 0];
  idx[7 * EW + 3] = 1000;
  CHECK(vsa_invert_cpu(idx, num, EB, ENQ, EW, ENKV, kidx, knum, &err) == 0,
        "repeats and bad indices past the count are never read");

  /* The caller splits bh with H = 3: bh 4 -> b=1, h=1. */
  vsa_list_error e = {VSA_LIST_INDEX_RANGE, 1, 1, 3, 99};
  char buf[160];
  vsa_list_error_format(&e, "q2k_idx", "q block", 8, buf, sizeof buf);
  CHECK(!strcmp(buf, "q2k_idx: index 99 out of range [0, 8) at (b=1, h=1, "
                     "q block=3)"),
        "format with (b, h) split by the caller: \"%s\"", buf);
  vsa_list_error e1 = {VSA_LIST_INDEX_RANGE, 0, 1, 3, 99};
  vsa_list_error_format(&e1, "q2k_idx", "q block", 8, buf, sizeof buf);
  CHECK(!strcmp(buf, "q2k_idx: index 99 out of range [0, 8) at (b=0, h=1, "
                     "q block=3)"),
        "format: \"%s\"", buf);
  vsa_list_error e2 = {VSA_LIST_COUNT_RANGE, 0, 0, 2, 9};
  vsa_list_error_format(&e2, "q2k_num", "q block", 8, buf, sizeof buf);
  CHECK(!strcmp(buf, "q2k_num: count 9 out of range [0, 8] at (b=0, h=0, "
                     "q block=2)"),
        "format: \"%s\"", buf);
  vsa_list_error e3 = {VSA_LIST_REPEATED, 0, 0, 1, 5};
  vsa_list_error_format(&e3, "q2k_idx", "q block", 8, buf, sizeof buf);
  CHECK(!strcmp(buf, "q2k_idx: kv block 5 repeated at (b=0, h=0, q block=1)"),
        "format: \"%s\"", buf);
  vsa_list_error_format(&e3, "k2q_idx", "kv block", 8, buf, sizeof buf);
  CHECK(!strcmp(buf, "k2q_idx: q block 5 repeated at (b=0, h=0, kv block=1)"),
        "format, k2q side: \"%s\"", buf);
  char small[12];
  vsa_list_error_format(&e3, "q2k_idx", "q block", 8, small, sizeof small);
  CHECK(strlen(small) == sizeof small - 1, "format truncates to buflen");

  CHECK(vsa_invert_cpu(idx, num, 0, ENQ, EW, ENKV, kidx, knum, &err) == -1 &&
            strstr(vsa_last_error(), "BH"),
        "BH = 0 rejected: \"%s\"", vsa_last_error());
}

int
main(void)
{
  static const int shapes[][5] = {
      /* BH, nq, nkv, width, maxcount */
      {6, 5, 7, 9, 7},     {3, 40, 13, 13, 13}, {2, 13, 40, 20, 20},
      {1, 1, 1, 1, 1},     {5, 33, 65, 70, 65}, {2, 100, 3, 3, 3},
      {4, 64, 64, 16, 16}, {1, 97, 31, 40, 31},
  };
  for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
    for (int tail = TAIL_MINUS1; tail <= TAIL_ZERO; tail++)
      test_random(shapes[s][0], shapes[s][1], shapes[s][2], shapes[s][3],
                  shapes[s][4], tail, 1000 + s * 10 + (uint64_t)tail);
  test_tails_identical();
  test_count_zero_head();
  test_errors();
  printf("%d passed, %d failed\n", passed, failed);
  return failed != 0;
}
