/* bwd_items.cuh — the work items of both sm_100a backwards (64- and
 * 128-token blocks): one kv block of one head, its k2q list cut to one q
 * chunk. The scheduler warp hands them out as tickets (an int64 per
 * slot: ticket << 24 | entries in the chunk) through two smem slots and
 * their full/empty mbarriers; every reader decodes the same item. Params
 * is either kernel's params (chunks, group_items, order, nkv, nq, q_chunk,
 * k2q_idx, k2q_num, k2q_width, sched). */
#pragma once
#include <stdint.h>

#include "../common/async_copy.cuh" // mbar_wait, mbar_arrive

namespace sm100bwd {

/* The entries of a k2q list that fall in [lo, hi) (one q chunk). */
struct item_list {
  const int32_t *list;
  int cnt, lo, hi;
  /* The first entry from e on inside the chunk (cnt: none). */
  __device__ __forceinline__ int next(int e) const
  {
    for (; e < cnt; e++) {
      int i = __ldg(list + e);
      if (i >= lo && i < hi) return e;
    }
    return cnt;
  }
};

struct item {
  int64_t bh;
  int j, c, valid; // kv block j of head bh, chunk c; valid: list entries in the chunk
  item_list l;
};

/* The item of a ticket: tickets walk the preprocess's order (longest list
 * first) group by group, each group's items chunk by chunk. */
template <class Params>
__device__ __forceinline__ item
decode_item(const Params &p, int64_t ticket, int valid)
{
  const int64_t per_group = (int64_t)p.chunks * p.group_items;
  const int64_t g = ticket / per_group, rem = ticket % per_group;
  const int c = (int)(rem / p.group_items), x = (int)(rem % p.group_items);
  const int64_t slot = g * p.group_items + x;
  const int64_t it = p.order ? __ldg(p.order + slot) : slot;
  item r;
  r.bh = it / p.nkv;
  r.j = (int)(it % p.nkv);
  r.c = c;
  r.valid = valid;
  r.l.list = p.k2q_idx + (r.bh * p.nkv + r.j) * (int64_t)p.k2q_width;
  r.l.cnt = min(max(__ldg(p.k2q_num + r.bh * p.nkv + r.j), 0), p.k2q_width);
  r.l.lo = max(c * p.q_chunk, 0);
  r.l.hi = min(p.nq, r.l.lo + p.q_chunk);
  return r;
}

/* The scheduler warp: entries of the item's list in its chunk (a
 * warp-wide count). */
__device__ __forceinline__ int
count_valid(const item_list &l)
{
  int n = 0;
  for (int e0 = 0; e0 < l.cnt; e0 += 32) {
    const int e = e0 + (threadIdx.x & 31);
    bool ok = false;
    if (e < l.cnt) {
      int i = __ldg(l.list + e);
      ok = i >= l.lo && i < l.hi;
    }
    n += __popc(__ballot_sync(0xffffffffu, ok));
  }
  return n;
}

/* A reader's copy of the scheduler's k-th item (a whole warp calls it):
 * slot k & 1, with its full and empty mbarriers at bars + 8·(full + slot)
 * and bars + 8·(empty + slot). false: the scheduler's end mark. */
template <class Params>
__device__ __forceinline__ bool
read_sched_item(const Params &p, uint32_t bars, int full, int empty, uint32_t k, item &it)
{
  const int s = k & 1;
  mbar_wait(bars + 8 * (full + s), (k >> 1) & 1);
  const int64_t v = *(reinterpret_cast<volatile int64_t *>(p.sched) + 2 * blockIdx.x + s);
  __syncwarp();
  if ((threadIdx.x & 31) == 0) mbar_arrive(bars + 8 * (empty + s));
  if (v < 0) return false;
  it = decode_item(p, v >> 24, (int)(v & 0xFFFFFF));
  return true;
}

}  // namespace sm100bwd
