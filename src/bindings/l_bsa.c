/* l_bsa.c — Lua bindings for block-sparse attention: metadata builders,
 * q2k -> k2q inversion, the reference forward/backward (CPU and GPU) and
 * the native sm90a backward (the oracle and compare are in l_check.c).
 * Conventions (shapes, lse format, formulas) are those of src/core/bsa.h; every
 * argument error names the argument and what was expected. Block ids inside
 * index tensors are 0-based.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bsa.h"
#include "check.h"
#include "device.h"
#include "kernels.h"
#include "l_args.h"
#include "l_memory.h"
#include "l_tensor.h"
#include "lua_api.h"
// ----------------------------------------------------------------------------
// metadata builders

/* vsalab.block_sizes() -> {64, 128}: the supported block sizes, ascending,
 * the first the default; and a table block -> its default video tile
 * {t, h, w} (bsa.h's vsa_block_table, the one list). */
static int
l_block_sizes(lua_State *L)
{
  lua_createtable(L, vsa_n_block_sizes, 0);
  lua_createtable(L, 0, vsa_n_block_sizes);
  for (int i = 0; i < vsa_n_block_sizes; i++) {
    lua_pushinteger(L, vsa_block_table[i].block);
    lua_rawseti(L, -3, i + 1);
    lua_createtable(L, 3, 0);
    for (int x = 0; x < 3; x++) {
      lua_pushinteger(L, vsa_block_table[i].tile[x]);
      lua_rawseti(L, -2, x + 1);
    }
    lua_rawseti(L, -2, vsa_block_table[i].block);
  }
  return 2;
}

/* vsalab.layouts() -> {'bhsd', 'bshd'}: the token layouts' names, the
 * first the default (bsa.h's vsa_layout, entry i + 1 being value i). */
static int
l_layouts(lua_State *L)
{
  lua_createtable(L, vsa_n_layouts, 0);
  for (int i = 0; i < vsa_n_layouts; i++) {
    lua_pushstring(L, vsa_layout_name(i));
    lua_rawseti(L, -2, i + 1);
  }
  return 1;
}

/* vsalab.video_blocks{T=, H=, W=, block=64, tile=, device=}
 *   -> vbs [nblocks] i32, padded_tokens (= block * nblocks), nblocks.
 * tile defaults to block's tile ({4,4,4} at 64, {2,8,8} at 128); a given
 * tile's volume is the block size (and must equal block when both are
 * given). */
static int
l_video_blocks(lua_State *L)
{
  static const char *const keys[] = {"T", "H", "W", "tile", "block", "device", NULL};
  vsa_arg_check_keys(L, 1, "video_blocks", keys);
  luaL_checktype(L, 1, LUA_TTABLE);
  int T = vsa_arg_int(L, 1, "T", 1, 0, 1, 1 << 20);
  int Hh = vsa_arg_int(L, 1, "H", 1, 0, 1, 1 << 20);
  int W = vsa_arg_int(L, 1, "W", 1, 0, 1, 1 << 20);
  int block = vsa_arg_block(L, 1, "video_blocks", VSA_BLOCK);
  lua_getfield(L, 1, "block");
  int block_given = !lua_isnil(L, -1);
  lua_pop(L, 1);
  const vsa_block_size_info *bi = vsa_block_info(block);
  int tile[3] = {bi->tile[0], bi->tile[1], bi->tile[2]};
  lua_getfield(L, 1, "tile");
  if (!lua_isnil(L, -1)) {
    if (!lua_istable(L, -1) || lua_objlen(L, -1) != 3)
      vsa_lua_errorf(L, "field 'tile' must be a table of 3 integers");
    for (int i = 0; i < 3; i++) {
      lua_rawgeti(L, -1, i + 1);
      lua_Number v = lua_tonumber(L, -1);
      if (lua_type(L, -1) != LUA_TNUMBER || v != floor(v) || v < 1 || v > VSA_BLOCK_MAX)
        vsa_lua_errorf(L, "field 'tile' must hold 3 integers in [1, %d]", VSA_BLOCK_MAX);
      tile[i] = (int)v;
      lua_pop(L, 1);
    }
    long long vol = (long long)tile[0] * tile[1] * tile[2];
    if (block_given && vol != block)
      vsa_lua_errorf(L, "video_blocks: field 'tile' %dx%dx%d has volume %lld, not the block "
                     "size %d", tile[0], tile[1], tile[2], vol, block);
    block = (int)(vol <= VSA_BLOCK_MAX ? vol : 0);
  }
  lua_pop(L, 1);
  int dev = vsa_arg_field_device(L, 1);
  int nblocks;
  if (vsa_build_video_blocks(T, Hh, W, tile[0], tile[1], tile[2], NULL,
                             &nblocks) != 0)
    return vsa_lua_raise(L);
  int64_t sh[1] = {nblocks};
  vsa_tensor *h = vsa_lua_newtensor(L, VSA_I32, VSA_CPU, 1, sh);
  if (vsa_build_video_blocks(T, Hh, W, tile[0], tile[1], tile[2],
                             vsa_tensor_data(h), &nblocks) != 0)
    return vsa_lua_raise(L);
  vsa_arg_push_on_device(L, lua_gettop(L), dev);
  lua_pushnumber(L, (lua_Number)nblocks * block);
  lua_pushinteger(L, nblocks);
  return 3;
}

/* vsalab.random_topk{B=, H=, nq=, nkv=, topk= | density=, width=,
 *   ragged=false, seed=, device=} -> q2k_idx [B,H,nq,width] i32,
 *   q2k_num [B,H,nq] i32, topk. density d gives topk = max(1, round(d*nkv)). */
static int
l_random_topk(lua_State *L)
{
  static const char *const keys[] = {"B", "H", "nq", "nkv", "topk", "density", "width", "ragged", "seed", "device", NULL};
  vsa_arg_check_keys(L, 1, "random_topk", keys);
  luaL_checktype(L, 1, LUA_TTABLE);
  int B = vsa_arg_int(L, 1, "B", 1, 0, 1, 65535);
  int H = vsa_arg_int(L, 1, "H", 1, 0, 1, 65535);
  int nq = vsa_arg_int(L, 1, "nq", 1, 0, 1, 1 << 24);
  int nkv = vsa_arg_int(L, 1, "nkv", 1, 0, 1, 1 << 24);
  int topk;
  lua_getfield(L, 1, "topk");
  int has_topk = !lua_isnil(L, -1);
  lua_pop(L, 1);
  lua_getfield(L, 1, "density");
  int has_density = !lua_isnil(L, -1);
  lua_pop(L, 1);
  if (has_topk && has_density)
    return vsa_lua_errorf(L, "random_topk: give 'density' or 'topk', not both");
  if (has_topk) {
    topk = vsa_arg_int(L, 1, "topk", 1, 0, 0, nkv);
  } else {
    double d = vsa_arg_num(L, 1, "density", NAN);
    if (!(d > 0 && d <= 1))
      return vsa_lua_errorf(L, "field 'density' must be in (0, 1] (or give 'topk')");
    topk = (int)floor(d * nkv + 0.5);
    if (topk < 1) topk = 1;
  }
  int width = vsa_arg_int(L, 1, "width", 0, topk > 0 ? topk : 1, 1, 1 << 24);
  if (width < topk) return vsa_lua_errorf(L, "field 'width' (%d) must be >= topk (%d)", width, topk);
  int ragged = vsa_arg_bool(L, 1, "random_topk", "ragged", 0);
  lua_getfield(L, 1, "seed");
  if (lua_isnil(L, -1)) return vsa_lua_errorf(L, "field 'seed' is required");
  lua_pop(L, 1);
  double seed = vsa_arg_num(L, 1, "seed", 0);
  if (!(seed >= 0 && seed == floor(seed) && seed < 9007199254740992.0))
    return vsa_lua_errorf(L, "field 'seed' must be an integer in [0, 2^53)");
  int dev = vsa_arg_field_device(L, 1);
  int64_t si[4] = {B, H, nq, width}, sn[3] = {B, H, nq};
  vsa_tensor *hi = vsa_lua_newtensor(L, VSA_I32, VSA_CPU, 4, si);
  int hi_idx = lua_gettop(L);
  vsa_tensor *hn = vsa_lua_newtensor(L, VSA_I32, VSA_CPU, 3, sn);
  int hn_idx = lua_gettop(L);
  if (vsa_build_random_topk(B, H, nq, nkv, topk, width, ragged,
                            (uint64_t)seed, vsa_tensor_data(hi),
                            vsa_tensor_data(hn)) != 0)
    return vsa_lua_raise(L);
  vsa_arg_push_on_device(L, hi_idx, dev);
  vsa_arg_push_on_device(L, hn_idx, dev);
  lua_pushinteger(L, topk);
  return 3;
}

/* vsalab.pair_count(num) -> the sum of a count tensor (selected pairs). */
static int
l_pair_count(lua_State *L)
{
  vsa_tensor *t = vsa_lua_checkarg(L, 1, "num", VSA_I32, -1);
  int64_t n = vsa_tensor_numel(t);
  vsa_tensor *h = t;
  if (t->device != VSA_CPU) {
    h = vsa_lua_newtensor(L, VSA_I32, VSA_CPU, t->ndim, t->shape);
    if (vsa_tensor_copy(h, t) != 0) return vsa_lua_raise(L);
  }
  const int32_t *p = vsa_tensor_data(h);
  double s = 0;
  for (int64_t i = 0; i < n; i++) {
    if (p[i] < 0) return vsa_lua_errorf(L, "pair_count: count %d at position %lld is negative", p[i], (long long)i);
    s += p[i];
  }
  lua_pushnumber(L, s);
  return 1;
}

// ----------------------------------------------------------------------------
// inversion

/* Invert lists idx [BH, rows, width] / num [BH, rows] (pointers on dev;
 * H = heads, to name (b, h) in errors) into out_idx [BH, cols, rows] /
 * out_num. ws: the CUDA bitmap workspace (bsa_invert_scratch_bytes), or
 * NULL to use the shared scratch. check=0 skips reading the validation flag
 * back on CUDA (no host synchronisation; the kernels still never read out of
 * bounds); the CPU always validates. what/num_name/row_name name things in
 * errors. */
static void
invert_ptrs(lua_State *L, int dev, const int32_t *idx, const int32_t *num,
            int BH, int H, int rows, int width, int cols, int32_t *out_idx,
            int32_t *out_num, void *ws, int check, const char *what,
            const char *num_name, const char *row_name)
{
  vsa_list_error err = {0};
  if (dev == VSA_CPU) {
    if (vsa_invert_cpu(idx, num, BH, rows, width, cols, out_idx, out_num,
                       &err) == 0)
      return;
    if (err.code == VSA_LIST_OK) vsa_lua_raise(L);
    /* The CPU inverter knows only bh: split it here. */
    err.h = err.b % H;
    err.b = err.b / H;
  } else {
    if (!ws) ws = vsa_device_scratch(L, dev, bsa_invert_scratch_bytes(BH, rows, cols));
    cudaError_t e = bsa_invert(idx, num, BH, rows, width, cols, out_idx,
                               out_num, ws, vsa_d_list_error, H, vsa_stream());
    if (e != cudaSuccess) vsa_arg_raise_cuda(L, e, "bsa_invert");
    if (!check) return;
    e = cudaMemcpy(&err, vsa_d_list_error, sizeof err, cudaMemcpyDeviceToHost);
    if (e != cudaSuccess) vsa_arg_raise_cuda(L, e, "bsa_invert");
    if (err.code == VSA_LIST_OK) return;
  }
  char msg[256];
  int range = err.code == VSA_LIST_COUNT_RANGE ? width : cols;
  vsa_list_error_format(&err, err.code == VSA_LIST_COUNT_RANGE ? num_name : what,
                        row_name, range, msg, sizeof msg);
  vsa_lua_errorf(L, "%s", msg);
}

/* invert_ptrs on tensors: idx [B,H,rows,width] / num -> out_idx
 * [B,H,cols,rows], out_num, on the lists' device. */
static void
invert_into(lua_State *L, const vsa_tensor *idx, const vsa_tensor *num,
            int H, int cols, vsa_tensor *out_idx, vsa_tensor *out_num,
            int check, const char *what, const char *num_name,
            const char *row_name)
{
  invert_ptrs(L, idx->device, vsa_tensor_data(idx), vsa_tensor_data(num),
              (int)(idx->shape[0] * idx->shape[1]), H, (int)idx->shape[2],
              (int)idx->shape[3], cols, vsa_tensor_data(out_idx),
              vsa_tensor_data(out_num), NULL, check, what, num_name, row_name);
}

/* Check a list pair idx [B,H,rows,width] i32 and num [B,H,rows] i32 on one
 * device; returns via pointers (converted i64 replaces the arguments). */
static void
list_pair(lua_State *L, int i_idx, int n_idx, const char *iname,
          const char *nname, vsa_tensor **idx, vsa_tensor **num)
{
  /* An i64 list is kept (pinned, on top) until its entries are checked. */
  vsa_tensor *t = luaL_testudata(L, i_idx, VSA_TENSOR_MT), *orig = NULL;
  if (t && t->st && t->dtype == VSA_I64) {
    lua_pushvalue(L, i_idx);
    orig = vsa_lua_pin(L, -1, iname);
  }
  *idx = vsa_arg_index(L, i_idx, iname, 4);
  *num = vsa_arg_index(L, n_idx, nname, 3);
  int64_t want[3] = {(*idx)->shape[0], (*idx)->shape[1], (*idx)->shape[2]};
  vsa_arg_shape(L, *num, nname, 3, want);
  vsa_arg_device(L, *num, nname, (*idx)->device, iname);
  if ((*idx)->shape[3] < 1)
    vsa_lua_errorf(L, "%s: list width must be >= 1", iname);
  if (orig) {
    vsa_arg_check_i64_entries(L, orig, *num, iname);
    lua_pop(L, 1);
  }
}

/* vsalab.invert_indices(q2k_idx, q2k_num, num_kv_blocks [, {out={idx, num},
 *   check=true}]) -> k2q_idx [B,H,nkv,nq] i32 (ascending q, -1 padded),
 *   k2q_num [B,H,nkv] i32. check=false skips reading the validation flag
 *   back (for timing; the kernel still never reads out of bounds). */
static int
l_invert_indices(lua_State *L)
{
  static const char *const keys[] = {"out", "check", NULL};
  vsa_arg_check_keys(L, 4, "invert_indices", keys);
  vsa_tensor *idx, *num;
  list_pair(L, 1, 2, "q2k_idx", "q2k_num", &idx, &num);
  lua_Number nkvn = luaL_checknumber(L, 3);
  luaL_argcheck(L, nkvn == floor(nkvn) && nkvn >= 1 && nkvn <= (1 << 24), 3,
                "num_kv_blocks must be an integer in [1, 2^24]");
  int nkv = (int)nkvn;
  int check = 1, ret = 0;
  vsa_tensor *oi = NULL, *on = NULL;
  int64_t si[4] = {idx->shape[0], idx->shape[1], nkv, idx->shape[2]};
  int64_t sn[3] = {idx->shape[0], idx->shape[1], nkv};
  if (!lua_isnoneornil(L, 4)) {
    luaL_checktype(L, 4, LUA_TTABLE);
    check = vsa_arg_bool(L, 4, "invert_indices", "check", 1);
    lua_getfield(L, 4, "out");
    if (!lua_isnil(L, -1)) {
      luaL_checktype(L, -1, LUA_TTABLE);
      int t = lua_gettop(L);
      lua_rawgeti(L, t, 1);
      lua_rawgeti(L, t, 2);
      ret = t + 1; /* the caller's buffers, returned as they are */
      lua_pushvalue(L, ret);
      oi = vsa_lua_checkarg(L, lua_gettop(L), "out[1] (k2q_idx)", VSA_I32, 4); /* pinned */
      lua_pushvalue(L, ret + 1);
      on = vsa_lua_checkarg(L, lua_gettop(L), "out[2] (k2q_num)", VSA_I32, 3);
      vsa_arg_shape(L, oi, "out[1] (k2q_idx)", 4, si);
      vsa_arg_shape(L, on, "out[2] (k2q_num)", 3, sn);
      vsa_arg_device(L, oi, "out[1] (k2q_idx)", idx->device, "q2k_idx");
      vsa_arg_device(L, on, "out[2] (k2q_num)", idx->device, "q2k_idx");
      if (oi->st == on->st || oi->st == idx->st || oi->st == num->st ||
          on->st == idx->st || on->st == num->st)
        return vsa_lua_errorf(L, "invert_indices: out buffers must not share memory with each other or the inputs");
    }
  }
  if (!oi) {
    oi = vsa_lua_newtensor(L, VSA_I32, idx->device, 4, si);
    on = vsa_lua_newtensor(L, VSA_I32, idx->device, 3, sn);
    ret = lua_gettop(L) - 1;
  }
  invert_into(L, idx, num, (int)idx->shape[1], nkv, oi, on, check, "q2k_idx",
              "q2k_num", "q block");
  lua_pushvalue(L, ret);
  lua_pushvalue(L, ret + 1);
  return 2;
}


/* A token tensor (q, k, v, o, dO) bf16 at idx in layout d->layout:
 * [B,H,S,D] (bhsd) or [B,S,H,D] (bshd). is_q: fills d's B, H, Sq, D and
 * device from it. Otherwise it must have q's B, H, D and device and S
 * tokens a head (S < 0: its own, read from it; sname names S in errors). */
static vsa_tensor *
qkv_arg(lua_State *L, int idx, const char *name, attn_dims *d, int is_q,
        const char *qname, int64_t S, const char *sname)
{
  vsa_tensor *t = vsa_lua_checkarg(L, idx, name, VSA_BF16, 4);
  const int sd = vsa_arg_seq_dim(d->layout), hd = 3 - sd;
  /* A tensor of the other layout reads as other dims: say which layout. */
  const char *as = d->layout == VSA_BSHD ? " (layout bshd [B,S,H,D])" : " (layout bhsd [B,H,S,D])";
  if (is_q) {
    d->B = t->shape[0];
    d->H = t->shape[hd];
    d->Sq = t->shape[sd];
    d->D = t->shape[3];
    d->device = t->device;
    if (d->Sq % VSA_BLOCK != 0 || d->Sq == 0)
      vsa_lua_errorf(L, "%s: sequence length %lld is not a positive multiple of 64%s",
                 name, (long long)d->Sq, as);
    if (d->D % 16 != 0 || d->D < 16 || d->D > 256)
      vsa_lua_errorf(L, "%s: head dim %lld must be a multiple of 16 in [16, 256]",
                 name, (long long)d->D);
    if (d->device != VSA_CPU && d->D != 64 && d->D != 128)
      vsa_lua_errorf(L, "%s: head dim %lld is not supported on the GPU (64 or 128)",
                 name, (long long)d->D);
    if (d->B < 1 || d->H < 1)
      vsa_lua_errorf(L, "%s: batch %lld and heads %lld must be >= 1", name, (long long)d->B,
                     (long long)d->H);
    if (d->B * d->H > 65535)
      vsa_lua_errorf(L, "%s: B*H = %lld exceeds 65535", name, (long long)(d->B * d->H));
    return t;
  }
  vsa_arg_device(L, t, name, d->device, qname);
  if (S < 0) {
    S = t->shape[sd];
    /* A tensor in the other layout: show the shape it would need. */
    if (t->shape[hd] != d->H && t->shape[sd] == d->H) S = t->shape[hd];
  }
  vsa_arg_token_shape(L, t, name, d->layout, sname, d->B, d->H, S, d->D);
  return t;
}

/* The block size of a call, from variable_block_sizes at idx (Skv / its
 * length, a supported size); checks Sq against it too. Sets d->block. */
static int
dims_block(lua_State *L, int idx, attn_dims *d)
{
  vsa_tensor *t = vsa_arg_index(L, idx, "variable_block_sizes", 1);
  d->block = vsa_arg_block_of_vbs(L, d->Skv, t->shape[0]);
  if (d->Sq % d->block != 0)
    vsa_lua_errorf(L, "q: sequence length %lld is not a multiple of the block size %d "
                   "(from variable_block_sizes)", (long long)d->Sq, d->block);
  return d->block;
}

static vsa_tensor *
vbs_arg(lua_State *L, int idx, const attn_dims *d)
{
  vsa_tensor *t = vsa_arg_index(L, idx, "variable_block_sizes", 1);
  int64_t want[1] = {d->Skv / d->block};
  vsa_arg_shape(L, t, "variable_block_sizes", 1, want);
  vsa_arg_device(L, t, "variable_block_sizes", d->device, "q");
  /* Read back (nkv ints): a size outside [0, block] would index out of bounds. */
  vsa_tensor *h = t;
  if (t->device != VSA_CPU) {
    h = vsa_lua_newtensor(L, VSA_I32, VSA_CPU, 1, t->shape);
    if (vsa_tensor_copy(h, t) != 0) vsa_lua_raise(L);
  }
  const int32_t *p = vsa_tensor_data(h);
  for (int64_t j = 0; j < want[0]; j++)
    if (p[j] < 0 || p[j] > d->block)
      vsa_lua_errorf(L, "variable_block_sizes: entry %d is %d, expected [0, %d]",
                 (int)j, p[j], d->block);
  if (h != t) lua_pop(L, 1);
  return t;
}

static float
opt_sm_scale(lua_State *L, int idx, const attn_dims *d)
{
  double s = 1.0 / sqrt((double)d->D);
  if (!lua_isnoneornil(L, idx)) {
    luaL_checktype(L, idx, LUA_TTABLE);
    s = vsa_arg_num(L, idx, "sm_scale", s);
    if (!(s >= 1e-30 && s <= 1e30))
      vsa_lua_errorf(L, "field 'sm_scale' must be a finite number in [1e-30, 1e30] (it is used as a float)");
  }
  return (float)s;
}

static void
fill_shape(const attn_dims *d, vsa_shape *s, float sm_scale)
{
  s->B = (int)d->B;
  s->H = (int)d->H;
  s->Sq = (int)d->Sq;
  s->Skv = (int)d->Skv;
  s->D = (int)d->D;
  s->sm_scale = sm_scale;
  s->block = d->block;
  s->layout = d->layout;
}

// ----------------------------------------------------------------------------
// reference forward / backward

/* vsalab.forward_ref(q, k, v, q2k_idx, q2k_num, variable_block_sizes
 *   [, {sm_scale=1/sqrt(D)}]) -> o [B,H,Sq,D] bf16, lse [B,H,Sq] f32 (M
 *   format). The block size is Skv / #variable_block_sizes (64 or 128);
 *   lists are [B,H,Sq/block,width]. The lists are validated (by inverting
 *   them) before use. */
static int
l_forward_ref(lua_State *L)
{
  static const char *const keys[] = {"sm_scale", "layout", NULL};
  vsa_arg_check_keys(L, 7, "forward_ref", keys);
  attn_dims d = {0};
  /* Pinned before the options are read: an option's __index may free one. */
  vsa_lua_checkarg(L, 1, "q", VSA_BF16, 4);
  vsa_lua_checkarg(L, 2, "k", VSA_BF16, 4);
  vsa_lua_checkarg(L, 3, "v", VSA_BF16, 4);
  d.layout = vsa_arg_layout(L, 7);
  vsa_tensor *q = qkv_arg(L, 1, "q", &d, 1, NULL, -1, "Sq");
  vsa_tensor *k = qkv_arg(L, 2, "k", &d, 0, "q", -1, "Skv");
  d.Skv = k->shape[vsa_arg_seq_dim(d.layout)];
  if (d.Skv % VSA_BLOCK != 0 || d.Skv == 0)
    return vsa_lua_errorf(L, "k: sequence length %lld is not a positive multiple of 64",
                      (long long)d.Skv);
  vsa_tensor *v = qkv_arg(L, 3, "v", &d, 0, "q", d.Skv, "Skv");
  dims_block(L, 6, &d);
  vsa_tensor *idx, *num;
  list_pair(L, 4, 5, "q2k_idx", "q2k_num", &idx, &num);
  int64_t want[3] = {d.B, d.H, d.Sq / d.block};
  vsa_arg_shape(L, num, "q2k_num", 3, want);
  vsa_arg_device(L, idx, "q2k_idx", d.device, "q");
  vsa_tensor *vbs = vbs_arg(L, 6, &d);
  float sm = opt_sm_scale(L, 7, &d);
  lua_settop(L, 6);
  int nq = (int)(d.Sq / d.block), nkv = (int)(d.Skv / d.block);
  /* Validate the lists by inverting them (errors name q2k_idx / q2k_num). */
  int64_t si[4] = {d.B, d.H, nkv, nq}, sn[3] = {d.B, d.H, nkv};
  vsa_tensor *ti = vsa_lua_newtensor(L, VSA_I32, d.device, 4, si);
  vsa_tensor *tn = vsa_lua_newtensor(L, VSA_I32, d.device, 3, sn);
  invert_into(L, idx, num, (int)d.H, nkv, ti, tn, 1, "q2k_idx", "q2k_num",
              "q block");
  /* ...and back: each q row's kv list in ascending order, so the result does
   * not depend on the order of the caller's lists. */
  int64_t ci[4] = {d.B, d.H, nq, nkv};
  idx = vsa_lua_newtensor(L, VSA_I32, d.device, 4, ci);
  num = vsa_lua_newtensor(L, VSA_I32, d.device, 3, want);
  invert_into(L, ti, tn, (int)d.H, nq, idx, num, 1, "k2q_idx", "k2q_num",
              "kv block");
  vsa_tensor_release(ti);
  vsa_tensor_release(tn);

  vsa_shape s;
  fill_shape(&d, &s, sm);
  int64_t so[4], sl[3] = {d.B, d.H, d.Sq};
  vsa_arg_layout_shape(d.layout, d.B, d.H, d.Sq, d.D, so);
  vsa_tensor *of = vsa_lua_newtensor(L, VSA_F32, d.device, 4, so);
  vsa_tensor *o = vsa_lua_newtensor(L, VSA_BF16, d.device, 4, so);
  vsa_tensor *lse = vsa_lua_newtensor(L, VSA_F32, d.device, 3, sl);
  int width = nkv;
  /* Poison: every element must be written by the kernels. */
  if (vsa_tensor_fill(lse, NAN) != 0 || vsa_tensor_fill(of, NAN) != 0)
    return vsa_lua_raise(L);
  if (d.device == VSA_CPU) {
    if (vsa_forward_ref_cpu(&s, vsa_tensor_data(q), vsa_tensor_data(k),
                            vsa_tensor_data(v), vsa_tensor_data(idx),
                            vsa_tensor_data(num), width, vsa_tensor_data(vbs),
                            vsa_tensor_data(of), vsa_tensor_data(lse)) != 0)
      return vsa_lua_raise(L);
  } else {
    cudaError_t e = bsa_forward_ref(&s, vsa_tensor_data(q), vsa_tensor_data(k),
                                    vsa_tensor_data(v), vsa_tensor_data(idx),
                                    vsa_tensor_data(num), width,
                                    vsa_tensor_data(vbs), vsa_tensor_data(of),
                                    vsa_tensor_data(lse), vsa_stream());
    if (e != cudaSuccess) vsa_arg_raise_cuda(L, e, "bsa_forward_ref");
  }
  if (vsa_tensor_convert(o, of) != 0) return vsa_lua_raise(L);
  vsa_tensor_release(of);
  return 2;
}

/* The arguments every backward takes: (dO, q, k, v, o, lse, k2q_idx,
 * k2q_num, variable_block_sizes [, opts]) at stack 1..10, checked by name.
 * vbs contents are read back and checked when check_vbs is set. */
typedef struct {
  attn_dims d;
  vsa_tensor *dO, *q, *k, *v, *o, *lse, *kidx, *knum, *vbs;
  int nq, nkv;
  float sm_scale;
} bwd_args;

static void
backward_args(lua_State *L, bwd_args *a, int check_vbs)
{
  attn_dims *d = &a->d;
  memset(d, 0, sizeof *d);
  /* Pinned before the options are read: an option's __index may free one;
   * in argument order, so a call missing them all names dO, its first. */
  static const char *const names[5] = {"dO", "q", "k", "v", "o"};
  for (int i = 0; i < 5; i++) vsa_lua_checkarg(L, i + 1, names[i], VSA_BF16, 4);
  d->layout = vsa_arg_layout(L, 10);
  a->q = qkv_arg(L, 2, "q", d, 1, NULL, -1, "Sq");
  /* q sets the shape the others must have; where dO and o agree with each
   * other but not with q, q is the odd one out (dO was blamed). */
  const vsa_tensor *dO = lua_touserdata(L, 1), *o = lua_touserdata(L, 5);
  if (memcmp(dO->shape, o->shape, sizeof o->shape[0] * 4) == 0 &&
      memcmp(dO->shape, a->q->shape, sizeof o->shape[0] * 4) != 0) {
    char got[128], want[128];
    vsa_arg_fmt_shape(a->q->shape, 4, got, sizeof got);
    vsa_arg_fmt_shape(o->shape, 4, want, sizeof want);
    vsa_lua_errorf(L, "q: shape %s does not match dO and o, both %s (layout %s)", got, want,
                   vsa_layout_name(d->layout));
  }
  a->dO = qkv_arg(L, 1, "dO", d, 0, "q", d->Sq, "Sq");
  a->k = qkv_arg(L, 3, "k", d, 0, "q", -1, "Skv");
  d->Skv = a->k->shape[vsa_arg_seq_dim(d->layout)];
  if (d->Skv % VSA_BLOCK != 0 || d->Skv == 0)
    vsa_lua_errorf(L, "k: sequence length %lld is not a positive multiple of 64",
                   (long long)d->Skv);
  a->v = qkv_arg(L, 4, "v", d, 0, "q", d->Skv, "Skv");
  a->o = qkv_arg(L, 5, "o", d, 0, "q", d->Sq, "Sq");
  a->lse = vsa_lua_checkarg(L, 6, "lse", VSA_F32, 3);
  int64_t sl[3] = {d->B, d->H, d->Sq};
  vsa_arg_shape(L, a->lse, "lse", 3, sl);
  vsa_arg_device(L, a->lse, "lse", d->device, "q");
  dims_block(L, 9, d);
  list_pair(L, 7, 8, "k2q_idx", "k2q_num", &a->kidx, &a->knum);
  a->nq = (int)(d->Sq / d->block);
  a->nkv = (int)(d->Skv / d->block);
  int64_t wantn[3] = {d->B, d->H, a->nkv};
  vsa_arg_shape(L, a->knum, "k2q_num", 3, wantn);
  vsa_arg_device(L, a->kidx, "k2q_idx", d->device, "q");
  /* k2q rows list q blocks: at least nq wide (a kv block selected by every
   * q block must fit). A narrower list is most likely q2k lists passed where
   * k2q lists belong, which would be read as k2q and "work". Wider lists
   * are padding (CASES.md case 4). */
  if (a->kidx->shape[3] < a->nq) {
    int64_t wanti[4] = {d->B, d->H, a->nkv, a->nq};
    char w[128], g[128];
    vsa_arg_fmt_shape(wanti, 4, w, sizeof w);
    vsa_arg_fmt_shape(a->kidx->shape, 4, g, sizeof g);
    vsa_lua_errorf(L, "k2q_idx: expected shape %s = [B,H,nkv,nq] (each kv block's q blocks; "
                   "wider is padding), got %s: q2k lists go through vsalab.invert_indices first",
                   w, g);
  }
  if (check_vbs) {
    a->vbs = vbs_arg(L, 9, d);
  } else {
    a->vbs = vsa_arg_index(L, 9, "variable_block_sizes", 1);
    int64_t want[1] = {a->nkv};
    vsa_arg_shape(L, a->vbs, "variable_block_sizes", 1, want);
    vsa_arg_device(L, a->vbs, "variable_block_sizes", d->device, "q");
  }
  a->sm_scale = opt_sm_scale(L, 10, d);
}

/* Reserve bytes (rounded up to 256) at offset *at of a buffer being laid
 * out; returns their offset. */
static size_t
carve(size_t *at, size_t bytes)
{
  size_t o = *at;
  *at += (bytes + 255) & ~(size_t)255;
  return o;
}

/* NaN-fill n floats at p on dev (launched on vsa_stream()). */
static void
poison_f32(lua_State *L, int dev, float *p, int64_t n)
{
  if (dev == VSA_CPU) {
    for (int64_t i = 0; i < n; i++) p[i] = NAN;
    return;
  }
  cudaError_t e = vsa_fill(p, VSA_F32, n, NAN, vsa_stream());
  if (e != cudaSuccess) vsa_arg_raise_cuda(L, e, "poison");
}

/* opts.out = {dq, dk, dv} of a backward (options at index 10): 0 when
 * absent. Otherwise pushes three pinned views (vsa_lua_pin) and then the
 * three buffers themselves (the top of the stack, in order, to return),
 * with outs the pinned views, after checking each: a contiguous rank-4 tensor of dtype
 * dt (dt_note follows the dtype in the message), shape sq (dq) or sk (dk,
 * dv), on q's device, sharing memory with no input and no other output.
 * Every mistake raises naming the buffer. */
static int
out_buffers(lua_State *L, const char *fn, const bwd_args *a, vsa_dtype dt,
            const char *dt_note, const int64_t *sq, const int64_t *sk, vsa_tensor *outs[3])
{
  static const char *const names[3] = {"out[1] (dq)", "out[2] (dk)", "out[3] (dv)"};
  static const char *const in_names[9] = {"dO", "q", "k", "v", "o", "lse",
                                          "k2q_idx", "k2q_num", "variable_block_sizes"};
  if (!lua_istable(L, 10)) return 0;
  lua_getfield(L, 10, "out");
  if (lua_isnil(L, -1)) {
    lua_pop(L, 1);
    return 0;
  }
  if (!lua_istable(L, -1))
    vsa_lua_errorf(L, "%s: field 'out' must be a table {dq, dk, dv}, got %s", fn,
                   luaL_typename(L, -1));
  int t = lua_gettop(L);
  const vsa_tensor *ins[9] = {a->dO, a->q, a->k, a->v, a->o, a->lse, a->kidx, a->knum, a->vbs};
  /* The caller's buffers at t+1..t+3 (returned as they are), each checked
   * through a pinned copy of the reference at t+4..t+6. */
  for (int x = 0; x < 3; x++) lua_rawgeti(L, t, x + 1);
  for (int x = 0; x < 3; x++) {
    lua_pushvalue(L, t + 1 + x);
    outs[x] = vsa_lua_checkarg(L, lua_gettop(L), names[x], -1, 4);
    if (outs[x]->dtype != dt)
      vsa_lua_errorf(L, "%s: expected dtype %s%s, got %s", names[x], vsa_dtype_name(dt),
                     dt_note, vsa_dtype_name(outs[x]->dtype));
    vsa_arg_shape(L, outs[x], names[x], 4, x == 0 ? sq : sk);
    vsa_arg_device(L, outs[x], names[x], a->d.device, "q");
    for (int y = 0; y < 9; y++)
      if (outs[x]->st == ins[y]->st)
        vsa_lua_errorf(L, "%s shares memory with %s", names[x], in_names[y]);
    for (int y = 0; y < x; y++)
      if (outs[x]->st == outs[y]->st)
        vsa_lua_errorf(L, "%s shares memory with %s", names[x], names[y]);
  }
  for (int x = 0; x < 3; x++) lua_insert(L, t + 1); /* pins first, buffers on top */
  lua_remove(L, t);
  return 1;
}

/* vsalab.backward_ref(dO, q, k, v, o, lse, k2q_idx, k2q_num,
 *   variable_block_sizes [, {sm_scale=1/sqrt(D), out_dtype='bf16',
 *   out={dq, dk, dv}, poison=true, validate=true}])
 *   -> dq [B,H,Sq,D], dk, dv [B,H,Skv,D] (bf16 or f32; dq and dk include
 *   sm_scale). The k2q lists are inverted to q2k (which the dq pass uses)
 *   and back, so dk/dv sum their q blocks in ascending order whatever the
 *   lists' order.
 * out: caller buffers, returned as the results: contiguous, dtype
 *   out_dtype, shapes as above, on q's device, sharing memory with no input
 *   and no other output (each mistake raises naming out[i]).
 * poison: NaN-fill what the kernels write (the f32 results and Delta)
 *   first, so an element they miss fails every check.
 * validate: read back the lists' validation flag and vbs and raise on bad
 *   ones (the CPU always does). validate=false on CUDA reads nothing back;
 *   the kernels still never read out of bounds (vbs is clamped to [0, block]).
 * The block size is Skv / #variable_block_sizes (64 or 128): lists are
 *   [B,H,Skv/block,*].
 * Scratch (q2k and canonical k2q lists, Delta, the f32 results of a bf16
 * call): with out on CUDA, the shared device scratch (grow-only); otherwise
 * one fresh buffer. So on CUDA a call with out, poison=false and
 * validate=false (and i32 lists) allocates nothing once the scratch has
 * grown, never synchronises, and launches only on vsa_stream(): it can be
 * captured into a CUDA graph. */
static int
l_backward_ref(lua_State *L)
{
  static const char *const keys[] = {"sm_scale", "out_dtype", "out", "poison",
                                     "validate", "layout", NULL};
  vsa_arg_check_keys(L, 10, "backward_ref", keys);
  bwd_args a;
  backward_args(L, &a, 0);
  attn_dims d = a.d;
  int nq = a.nq, nkv = a.nkv, BH = (int)(d.B * d.H);
  vsa_dtype out_dt = VSA_BF16;
  int poison = 1, validate = 1;
  lua_settop(L, 10);
  if (lua_istable(L, 10)) {
    lua_getfield(L, 10, "out_dtype");
    if (!lua_isnil(L, -1)) {
      const char *s = lua_tostring(L, -1);
      if (!s || (strcmp(s, "bf16") != 0 && strcmp(s, "f32") != 0))
        return vsa_lua_errorf(L, "field 'out_dtype' must be 'bf16' or 'f32'");
      out_dt = strcmp(s, "f32") == 0 ? VSA_F32 : VSA_BF16;
    }
    lua_pop(L, 1);
    poison = vsa_arg_bool(L, 10, "backward_ref", "poison", 1);
    validate = vsa_arg_bool(L, 10, "backward_ref", "validate", 1);
  }
  int64_t sq[4], sk[4];
  vsa_arg_layout_shape(d.layout, d.B, d.H, d.Sq, d.D, sq);
  vsa_arg_layout_shape(d.layout, d.B, d.H, d.Skv, d.D, sk);
  vsa_tensor *outs[3];
  /* The results stay at ret..ret+2 for the whole call (and are returned):
   * new tensors at 11..13, or the out buffers at 14..16 (pins at 11..13). */
  int have_out = out_buffers(L, "backward_ref", &a, out_dt, " (out_dtype)", sq, sk, outs);
  int ret = have_out ? 14 : 11;
  if (!have_out)
    for (int x = 0; x < 3; x++)
      outs[x] = vsa_lua_newtensor(L, out_dt, d.device, 4, x == 0 ? sq : sk);
  if (validate || d.device == VSA_CPU) a.vbs = vbs_arg(L, 9, &d);
  int64_t n_out[3] = {vsa_tensor_numel(outs[0]), vsa_tensor_numel(outs[1]),
                      vsa_tensor_numel(outs[2])};

  /* One buffer for everything else; with out on CUDA the inversion
   * workspace joins it, so the shared scratch is asked once (asking again
   * with more bytes would move it). */
  int use_scratch = have_out && d.device != VSA_CPU;
  size_t at = 0, ws_bytes = 0, o_f32[3] = {0, 0, 0};
  if (use_scratch) {
    size_t w1 = bsa_invert_scratch_bytes(BH, nkv, nq), w2 = bsa_invert_scratch_bytes(BH, nq, nkv);
    ws_bytes = w1 > w2 ? w1 : w2;
  }
  size_t o_ws = carve(&at, ws_bytes);
  size_t o_qi = carve(&at, (size_t)BH * nq * nkv * 4), o_qn = carve(&at, (size_t)BH * nq * 4);
  size_t o_ki = carve(&at, (size_t)BH * nkv * nq * 4), o_kn = carve(&at, (size_t)BH * nkv * 4);
  size_t o_delta = carve(&at, (size_t)(BH * d.Sq) * 4);
  if (out_dt != VSA_F32)
    for (int x = 0; x < 3; x++) o_f32[x] = carve(&at, (size_t)n_out[x] * 4);
  char *base;
  vsa_tensor *work = NULL;
  if (use_scratch) {
    base = vsa_device_scratch(L, d.device, at);
  } else {
    int64_t n = (int64_t)(at / 4);
    work = vsa_lua_newtensor(L, VSA_F32, d.device, 1, &n);
    base = vsa_tensor_data(work);
  }
  int32_t *q2k_idx = (int32_t *)(base + o_qi), *q2k_num = (int32_t *)(base + o_qn);
  int32_t *k2q_idx = (int32_t *)(base + o_ki), *k2q_num = (int32_t *)(base + o_kn);
  float *delta = (float *)(base + o_delta), *f[3];
  for (int x = 0; x < 3; x++)
    f[x] = out_dt == VSA_F32 ? vsa_tensor_data(outs[x]) : (float *)(base + o_f32[x]);
  void *ws = use_scratch ? base + o_ws : NULL;

  /* q2k from k2q: the same inversion, rows and columns swapped... */
  invert_ptrs(L, d.device, vsa_tensor_data(a.kidx), vsa_tensor_data(a.knum), BH,
              (int)d.H, nkv, (int)a.kidx->shape[3], nq, q2k_idx, q2k_num, ws,
              validate, "k2q_idx", "k2q_num", "kv block");
  /* ...and back, so dk/dv sum their q blocks in ascending order whatever
   * order the caller's k2q lists have (bitwise-deterministic dk/dv). */
  invert_ptrs(L, d.device, q2k_idx, q2k_num, BH, (int)d.H, nq, nkv, nkv,
              k2q_idx, k2q_num, ws, validate, "q2k_idx", "q2k_num", "q block");

  vsa_shape s;
  fill_shape(&d, &s, a.sm_scale);
  if (poison) {
    for (int x = 0; x < 3; x++) poison_f32(L, d.device, f[x], n_out[x]);
    poison_f32(L, d.device, delta, BH * d.Sq);
  }
  if (d.device == VSA_CPU) {
    if (vsa_backward_ref_cpu(&s, vsa_tensor_data(a.dO), vsa_tensor_data(a.q),
                             vsa_tensor_data(a.k), vsa_tensor_data(a.v),
                             vsa_tensor_data(a.o), vsa_tensor_data(a.lse),
                             k2q_idx, k2q_num, nq, q2k_idx, q2k_num, nkv,
                             vsa_tensor_data(a.vbs), f[0], f[1], f[2], delta) != 0)
      return vsa_lua_raise(L);
  } else {
    cudaError_t e = bsa_backward_ref(
        &s, vsa_tensor_data(a.dO), vsa_tensor_data(a.q), vsa_tensor_data(a.k),
        vsa_tensor_data(a.v), vsa_tensor_data(a.o), vsa_tensor_data(a.lse),
        k2q_idx, k2q_num, nq, q2k_idx, q2k_num, nkv, vsa_tensor_data(a.vbs),
        f[0], f[1], f[2], delta, vsa_stream());
    if (e != cudaSuccess) vsa_arg_raise_cuda(L, e, "bsa_backward_ref");
  }
  if (out_dt != VSA_F32) {
    /* bf16 round to nearest even, as vsa_tensor_convert. */
    for (int x = 0; x < 3; x++) {
      uint16_t *dst = vsa_tensor_data(outs[x]);
      if (d.device == VSA_CPU) {
        for (int64_t i = 0; i < n_out[x]; i++) dst[i] = vsa_f32_to_bf16(f[x][i]);
      } else {
        cudaError_t e = vsa_convert(dst, VSA_BF16, f[x], VSA_F32, n_out[x], vsa_stream());
        if (e != cudaSuccess) vsa_arg_raise_cuda(L, e, "vsa_convert");
      }
    }
  }
  if (work) vsa_tensor_release(work);
  for (int x = 0; x < 3; x++) lua_pushvalue(L, ret + x);
  return 3;
}

/* Compute capability major*10+minor of a device (cached per device). */
static int
device_cc(lua_State *L, int dev)
{
  static int cached[64];
  if (dev < 0 || dev >= 64) return 0;
  if (!cached[dev]) {
    int ma = 0, mi = 0;
    cudaError_t e = cudaDeviceGetAttribute(&ma, cudaDevAttrComputeCapabilityMajor, dev);
    if (e == cudaSuccess)
      e = cudaDeviceGetAttribute(&mi, cudaDevAttrComputeCapabilityMinor, dev);
    if (e != cudaSuccess) vsa_arg_raise_cuda(L, e, "device capability");
    cached[dev] = ma * 10 + mi;
  }
  return cached[dev];
}

/* The native backwards share one binding: native(L, arch) below. */
typedef enum { NATIVE_SM90A, NATIVE_SM100A } native_arch;

/* Can this device run the sm100a kernel (emulated: the sm_90a build of it)?
 * 0, or raises naming what is missing: no image for the device (cc 10.x
 * for the hardware build, sm_90a for the emulation), too little opt-in
 * shared memory. No Blackwell GPU is available to this project: the
 * hardware kernel is compiled and inspected, never run. */
static void
sm100a_device_check(lua_State *L, int dev, int emulate)
{
  int cc = device_cc(L, dev);
  if (emulate ? cc != 90 : cc / 10 != 10)
    vsa_lua_errorf(L, "backward_sm100a%s needs compute capability %s, cuda:%d is %d.%d",
                   emulate ? " (emulate=true)" : "", emulate ? "9.0 (the emulation)" : "10.x",
                   dev, cc / 10, cc % 10);
  if (!(emulate ? bsa_backward_sm100a_has_image_emu() : bsa_backward_sm100a_has_image()))
    vsa_lua_errorf(L, "backward_sm100a: this build has no kernel image for cuda:%d (cc %d.%d)",
                   dev, cc / 10, cc % 10);
  int optin = 0;
  size_t need = emulate ? bsa_backward_sm100a_smem_bytes_emu() : bsa_backward_sm100a_smem_bytes();
  if (cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess ||
      (size_t)optin < need)
    vsa_lua_errorf(L, "backward_sm100a needs %zu bytes of opt-in shared memory, cuda:%d has %d",
                   need, dev, optin);
}

static int
l_sm100a_image_check(lua_State *L)
{
  sm100a_device_check(L, (int)lua_tointeger(L, 1), lua_toboolean(L, 2));
  return 0;
}

/* vsalab.backward_sm90a(dO, q, k, v, o, lse, k2q_idx, k2q_num,
 *   variable_block_sizes [, {sm_scale=1/sqrt(D), out={dq, dk, dv},
 *   poison=true, validate=false, canonical=true, version=3 (1..5),
 *   deterministic=true (versions 3, 4; false for 1, 2), q_chunk=512}])
 *   -> dq, dk, dv bf16
 *   (dq, dk × sm_scale).
 * vsalab.backward_sm100a(same [, {sm_scale, out, poison, validate,
 *   canonical, deterministic=true, q_chunk=512, emulate=false}]): the
 *   Blackwell kernel (kernels/sm100/), same contract; emulate=true runs its
 *   sm_90a build over the emulated tcgen05 layer (an H200). Never run on
 *   Blackwell here: no such GPU is available to this project.
 * canonical sorts each kv list (two inversions) so dk/dv are bitwise the
 * same whatever the list order; canonical=false skips it for lists already
 * ascending (vsalab.invert_indices output). version (sm90a) picks the main
 * kernel: 5 (block 128 only: 128-row tiles, one CTA a 128-token kv block
 * loading each 128-token q block once), 3 (warp-specialized TMA producer,
 * default; at block 128 it runs v4 on 64-token sub-block lists), 4 (v3 with two kv
 * blocks a CTA that share each q block both select: one load and one dQ
 * reduce for it; needs ascending lists to share, which canonical gives),
 * 2 (one warpgroup, bulk dQ reduce) or 1 (dQ by atomics);
 * kernels/NOTES.md has each one's figures. deterministic=true makes dq the
 * same bits every run: the dQ partials are added as int32 fixed point,
 * exact in any order (the default of sm90a versions 3 and 4 and of
 * sm100a), instead of fp32 in arrival order (deterministic=false: the
 * `-fp32` backends; not reproducible bit for bit); the
 * per-row scale bound is in kernels/common/bwd_prep.h.
 * q_chunk (default 512, 0 = off) takes each kv block's pairs one range of
 * q_chunk q blocks at a time, all kv blocks of a range before the next, so
 * the Q/dO/dQ working set stays in L2 at long sequences; it costs scratch of
 * 8·B·H·Skv·D bytes for the dK/dV partials.
 * CUDA tensors on a device the kernel runs on, D = 128. List and vbs
 * contents are not read on the host unless validate=true (the kernels never
 * read past a count and skip out-of-range entries). poison fills the
 * outputs and the scratch with NaN first, so an element the kernel fails to
 * write fails every check; out reuses caller buffers (with poison=false:
 * kernel-only timing). */
static int
native(lua_State *L, native_arch arch)
{
  static const char *const keys90[] = {"sm_scale", "out", "poison", "validate", "canonical",
                                       "version", "deterministic", "q_chunk", "layout", NULL};
  static const char *const keys100[] = {"sm_scale", "out", "poison", "validate", "canonical",
                                        "deterministic", "q_chunk", "emulate", "layout", NULL};
  const char *fn = arch == NATIVE_SM90A ? "backward_sm90a" : "backward_sm100a";
  vsa_arg_check_keys(L, 10, fn, arch == NATIVE_SM90A ? keys90 : keys100);
  /* The fixed-point (deterministic) dQ is the default wherever the kernel
   * has it: sm100a, sm90a versions 3 and 4 (-1: not given). */
  int validate = 0, poison = 1, canonical = 1, q_chunk = 512, emulate = 0;
  int deterministic = -1;
  vsa_sm90a_variant variant = VSA_SM90A_WS;
  if (lua_istable(L, 10)) {
    validate = vsa_arg_bool(L, 10, fn, "validate", 0);
    poison = vsa_arg_bool(L, 10, fn, "poison", 1);
    canonical = vsa_arg_bool(L, 10, fn, "canonical", 1);
    lua_getfield(L, 10, "deterministic");
    int given = !lua_isnil(L, -1);
    lua_pop(L, 1);
    if (given) deterministic = vsa_arg_bool(L, 10, fn, "deterministic", 1);
    if (arch == NATIVE_SM100A) emulate = vsa_arg_bool(L, 10, fn, "emulate", 0);
    lua_getfield(L, 10, "q_chunk");
    if (!lua_isnil(L, -1)) {
      lua_Number v = lua_tonumber(L, -1);
      if (lua_type(L, -1) != LUA_TNUMBER || v != floor(v) || v < 0 || v > 1 << 24)
        return vsa_lua_errorf(L, "%s: field 'q_chunk' must be an integer in "
                                 "[0, 2^24] (q blocks per chunk, 0: no chunking)", fn);
      q_chunk = (int)v;
    }
    lua_pop(L, 1);
    if (arch == NATIVE_SM90A) {
      lua_getfield(L, 10, "version");
      if (!lua_isnil(L, -1)) {
        lua_Number v = lua_tonumber(L, -1);
        if (lua_type(L, -1) != LUA_TNUMBER || (v != 1 && v != 2 && v != 3 && v != 4 && v != 5))
          return vsa_lua_errorf(L, "backward_sm90a: field 'version' must be 1, 2, 3, 4 or 5");
        variant = v == 5   ? VSA_SM90A_B128
                  : v == 4 ? VSA_SM90A_KV2
                  : v == 3 ? VSA_SM90A_WS
                  : v == 2 ? VSA_SM90A_BULK
                           : VSA_SM90A_ATOMIC;
      }
      lua_pop(L, 1);
    }
  }
  const int tma = variant == VSA_SM90A_WS || variant == VSA_SM90A_KV2 || variant == VSA_SM90A_B128;
  if (deterministic < 0) deterministic = arch == NATIVE_SM100A || tma;
  if (deterministic && !tma)
    return vsa_lua_errorf(L, "backward_sm90a: deterministic=true needs version 3, 4 or 5");
  /* Versions 1 and 2 do not chunk: no scratch for chunk partials. */
  if (arch == NATIVE_SM90A && !tma) q_chunk = 0;
  bwd_args a;
  backward_args(L, &a, validate);
  attn_dims d = a.d;
  if (d.device == VSA_CPU)
    return vsa_lua_errorf(L, "q: %s runs on CUDA tensors, got cpu", fn);
  if (arch == NATIVE_SM90A) {
    int cc = device_cc(L, d.device);
    if (cc != 90)
      return vsa_lua_errorf(L, "backward_sm90a needs compute capability 9.0, cuda:%d is %d.%d",
                            d.device, cc / 10, cc % 10);
  } else {
    sm100a_device_check(L, d.device, emulate);
  }
  if (d.D != 128)
    return vsa_lua_errorf(L, "q: %s takes head dim 128, got %lld", fn, (long long)d.D);
  vsa_shape s;
  fill_shape(&d, &s, a.sm_scale);
  if (arch == NATIVE_SM90A && variant == VSA_SM90A_B128 && s.block != 128)
    return vsa_lua_errorf(L, "backward_sm90a: version 5 takes 128-token blocks, got block %d",
                          s.block ? s.block : 64);
  int64_t sq[4], sk[4];
  vsa_arg_layout_shape(d.layout, d.B, d.H, d.Sq, d.D, sq);
  vsa_arg_layout_shape(d.layout, d.B, d.H, d.Skv, d.D, sk);
  vsa_tensor *ci = NULL, *cn = NULL;
  if (validate || canonical) {
    /* k2q -> q2k validates the lists; q2k -> k2q again gives every kv row
     * its q blocks in ascending order, so dk/dv (summed in list order) do
     * not depend on the caller's order. Kept on the stack until the end. */
    int64_t qi[4] = {d.B, d.H, a.nq, a.nkv}, qn[3] = {d.B, d.H, a.nq};
    vsa_tensor *ti = vsa_lua_newtensor(L, VSA_I32, d.device, 4, qi);
    vsa_tensor *tn = vsa_lua_newtensor(L, VSA_I32, d.device, 3, qn);
    invert_into(L, a.kidx, a.knum, (int)d.H, a.nq, ti, tn, validate, "k2q_idx",
                "k2q_num", "kv block");
    if (canonical) {
      int64_t ki[4] = {d.B, d.H, a.nkv, a.nq}, kn[3] = {d.B, d.H, a.nkv};
      ci = vsa_lua_newtensor(L, VSA_I32, d.device, 4, ki);
      cn = vsa_lua_newtensor(L, VSA_I32, d.device, 3, kn);
      invert_into(L, ti, tn, (int)d.H, a.nkv, ci, cn, 0, "q2k_idx", "q2k_num",
                  "q block");
    }
    /* Free the q2k lists now; their userdata may be collected once popped. */
    vsa_tensor_release(ti);
    vsa_tensor_release(tn);
    if (canonical) {
      lua_remove(L, -3);
      lua_remove(L, -3);
    } else {
      lua_pop(L, 2);
    }
  }
  if (ci) {
    a.kidx = ci;
    a.knum = cn;
  }
  vsa_tensor *outs[3];
  if (!out_buffers(L, fn, &a, VSA_BF16, "", sq, sk, outs))
    for (int x = 0; x < 3; x++)
      outs[x] = vsa_lua_newtensor(L, VSA_BF16, d.device, 4, x == 0 ? sq : sk);
  if (poison)
    for (int x = 0; x < 3; x++)
      if (vsa_tensor_fill(outs[x], NAN) != 0) return vsa_lua_raise(L);
  int sms = 0;
  if (arch == NATIVE_SM100A) {
    cudaError_t e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, d.device);
    if (e != cudaSuccess) vsa_arg_raise_cuda(L, e, "multiprocessor count");
  }
  size_t ws_bytes = arch == NATIVE_SM90A ? bsa_backward_sm90a_scratch_bytes(&s, q_chunk)
                    : emulate          ? bsa_backward_sm100a_scratch_bytes_emu(&s, q_chunk, sms)
                                       : bsa_backward_sm100a_scratch_bytes(&s, q_chunk, sms);
  void *ws = vsa_device_scratch(L, d.device, ws_bytes);
  if (poison) {
    cudaError_t e = vsa_fill(ws, VSA_F32, (int64_t)(ws_bytes / 4), NAN, vsa_stream());
    if (e != cudaSuccess) vsa_arg_raise_cuda(L, e, "scratch poison");
  }
  const void *dO = vsa_tensor_data(a.dO), *q = vsa_tensor_data(a.q), *k = vsa_tensor_data(a.k),
             *v = vsa_tensor_data(a.v), *o = vsa_tensor_data(a.o);
  cudaError_t e;
  if (arch == NATIVE_SM90A)
    e = bsa_backward_sm90a(&s, dO, q, k, v, o, vsa_tensor_data(a.lse), vsa_tensor_data(a.kidx),
                           vsa_tensor_data(a.knum), (int)a.kidx->shape[3],
                           vsa_tensor_data(a.vbs), ws, vsa_tensor_data(outs[0]),
                           vsa_tensor_data(outs[1]), vsa_tensor_data(outs[2]), variant,
                           deterministic, q_chunk, vsa_stream());
  else
    e = (emulate ? bsa_backward_sm100a_emu : bsa_backward_sm100a)(
        &s, dO, q, k, v, o, vsa_tensor_data(a.lse), vsa_tensor_data(a.kidx),
        vsa_tensor_data(a.knum), (int)a.kidx->shape[3], vsa_tensor_data(a.vbs), ws,
        vsa_tensor_data(outs[0]), vsa_tensor_data(outs[1]), vsa_tensor_data(outs[2]),
        deterministic, q_chunk, sms, vsa_stream());
  if (e == cudaErrorInvalidValue && s.block != VSA_BLOCK)
    return vsa_lua_errorf(L, "%s: block size %d is not supported by this kernel", fn, s.block);
  if (e != cudaSuccess)
    vsa_arg_raise_cuda(L, e, arch == NATIVE_SM90A ? "bsa_backward_sm90a"
                             : emulate            ? "bsa_backward_sm100a_emu"
                                                  : "bsa_backward_sm100a");
  return 3; /* the three outputs are the top of the stack */
}

static int
l_backward_sm90a(lua_State *L)
{
  return native(L, NATIVE_SM90A);
}

static int
l_backward_sm100a(lua_State *L)
{
  return native(L, NATIVE_SM100A);
}

/* vsalab.sm100a_image(emulate) -> ok, why: does this build have a kernel
 * image of the sm100a backward (emulate: its sm_90a emulated build) for the
 * current device, with enough opt-in shared memory? Never raises. */
static int
l_sm100a_image(lua_State *L)
{
  int emulate = lua_toboolean(L, 1);
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) {
    (void)cudaGetLastError();
    lua_pushboolean(L, 0);
    lua_pushstring(L, "no CUDA device");
    return 2;
  }
  lua_pushcfunction(L, l_sm100a_image_check);
  lua_pushinteger(L, dev);
  lua_pushboolean(L, emulate);
  if (lua_pcall(L, 2, 0, 0) != 0) {
    lua_pushboolean(L, 0);
    lua_insert(L, -2);
    return 2;
  }
  lua_pushboolean(L, 1);
  return 1;
}

static const luaL_Reg functions[] = {
    {"block_sizes", l_block_sizes}, {"layouts", l_layouts},
    {"video_blocks", l_video_blocks}, {"random_topk", l_random_topk},
    {"pair_count", l_pair_count}, {"invert_indices", l_invert_indices},
    {"forward_ref", l_forward_ref}, {"backward_ref", l_backward_ref},
    {"backward_sm90a", l_backward_sm90a}, {"backward_sm100a", l_backward_sm100a},
    {"sm100a_image", l_sm100a_image},
    {NULL, NULL}};

void
vsa_lua_open_bsa(lua_State *L)
{
  luaL_register(L, NULL, functions);
}
