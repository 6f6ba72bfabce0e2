/* l_vsa_lists.c — Lua bindings for VSA-like lists (src/core/vsa_lists.h):
 * vsalab.smooth_latent, vsalab.vsa_topk, vsalab.list_sharing. The work
 * runs on host threads; CUDA tensors are copied to the host and back (a few
 * GB/s, seconds at Wan 720P H40), so CPU and CUDA give the same results
 * for the same input bits. Every argument error names the argument.
 */
#include <math.h>
#include <string.h>

#include "bsa.h"
#include "check.h"
#include "l_args.h"
#include "l_tensor.h"
#include "lua_api.h"
#include "vsa_lists.h"

// ----------------------------------------------------------------------------
// shared argument readers

/* Fields 'latent' ({T, H, W}, required when `required`) and 'tile' (default
 * block's tile in bsa.h's vsa_block_table: {4, 4, 4} at 64, {2, 8, 8} at
 * 128) of the table at idx; a given tile must have volume block. Returns 0
 * when latent is absent. */
static int
latent_arg(lua_State *L, int idx, const char *fn, int required, int block, vsa_latent *lat)
{
  const vsa_block_size_info *bi = vsa_block_info(block);
  int tile[3] = {bi->tile[0], bi->tile[1], bi->tile[2]}, ext[3];
  const char *names[2] = {"latent", "tile"};
  for (int f = 0; f < 2; f++) {
    lua_getfield(L, idx, names[f]);
    if (lua_isnil(L, -1)) {
      lua_pop(L, 1);
      if (f == 0 && required)
        return vsa_lua_errorf(L, "%s: field 'latent' ({T, H, W}) is required", fn);
      if (f == 0) return 0;
      continue;
    }
    if (!lua_istable(L, -1) || lua_objlen(L, -1) != 3)
      return vsa_lua_errorf(L, "%s: field '%s' must be a table of 3 integers {T, H, W}", fn,
                            names[f]);
    for (int i = 0; i < 3; i++) {
      lua_rawgeti(L, -1, i + 1);
      lua_Number v = lua_tonumber(L, -1);
      if (lua_type(L, -1) != LUA_TNUMBER || v != floor(v) || v < 1 || v > (1 << 20))
        return vsa_lua_errorf(L, "%s: field '%s' must hold 3 integers in [1, 2^20]", fn,
                              names[f]);
      (f == 0 ? ext : tile)[i] = (int)v;
      lua_pop(L, 1);
    }
    lua_pop(L, 1);
  }
  *lat = (vsa_latent){ext[0], ext[1], ext[2], tile[0], tile[1], tile[2]};
  if ((int64_t)tile[0] * tile[1] * tile[2] != block)
    return vsa_lua_errorf(L, "%s: field 'tile' %dx%dx%d has volume %lld, not the block size %d",
                          fn, tile[0], tile[1], tile[2], (long long)tile[0] * tile[1] * tile[2],
                          block);
  int nb;
  if (vsa_build_video_blocks(lat->T, lat->Hh, lat->W, lat->tT, lat->tH, lat->tW, NULL, &nb) != 0)
    return vsa_lua_errorf(L, "%s: %s", fn, vsa_last_error());
  return nb;
}

/* The block size of a call: field 'block', else the volume of field 'tile'
 * when it is a table of 3 numbers, else 64; must be supported. */
static int
block_arg(lua_State *L, int idx, const char *fn)
{
  int def = VSA_BLOCK;
  lua_getfield(L, idx, "tile");
  if (lua_istable(L, -1) && lua_objlen(L, -1) == 3) {
    long long vol = 1;
    for (int i = 0; i < 3; i++) {
      lua_rawgeti(L, -1, i + 1);
      lua_Number v = lua_tonumber(L, -1);
      vol *= (v >= 1 && v <= (1 << 20)) ? (long long)v : 0;
      lua_pop(L, 1);
    }
    if (vol > 0 && vol <= (1 << 20)) def = (int)vol;
  }
  lua_pop(L, 1);
  lua_getfield(L, idx, "block");
  int given = !lua_isnil(L, -1);
  lua_pop(L, 1);
  if (!given && !vsa_block_supported(def))
    return vsa_lua_errorf(L, "%s: field 'tile' has volume %d, not a supported block size (%s)",
                          fn, def, vsa_block_sizes_text());
  return vsa_arg_block(L, idx, fn, def);
}

static int
threads_arg(lua_State *L, int idx)
{
  return vsa_arg_int(L, idx, "threads", 0, vsa_lists_default_threads(), 1, 64);
}

/* A host copy of t (t itself on the CPU), pushed on the stack. */
static vsa_tensor *
host_copy(lua_State *L, vsa_tensor *t)
{
  if (t->device == VSA_CPU) {
    lua_pushnil(L); /* keeps the stack shape the same either way */
    return t;
  }
  vsa_tensor *h = vsa_lua_newtensor(L, t->dtype, VSA_CPU, t->ndim, t->shape);
  if (vsa_tensor_copy(h, t) != 0) vsa_lua_raise(L);
  return h;
}

/* t (bf16 [B, S, H, D] on any device) as a host tensor [B, H, S, D], pushed
 * on the stack: the list builders index BHSD, and they are not timed. */
static vsa_tensor *
host_bhsd_of_bshd(lua_State *L, vsa_tensor *t)
{
  vsa_tensor *h = host_copy(L, t);
  int64_t B = t->shape[0], S = t->shape[1], H = t->shape[2], D = t->shape[3];
  int64_t sh[4] = {B, H, S, D};
  vsa_tensor *o = vsa_lua_newtensor(L, VSA_BF16, VSA_CPU, 4, sh);
  const uint16_t *src = vsa_tensor_data(h);
  uint16_t *dst = vsa_tensor_data(o);
  for (int64_t b = 0; b < B; b++)
    for (int64_t s = 0; s < S; s++)
      for (int64_t hh = 0; hh < H; hh++)
        memcpy(dst + ((b * H + hh) * S + s) * D, src + ((b * S + s) * H + hh) * D,
               (size_t)D * sizeof *dst);
  if (h != t) vsa_tensor_release(h);
  return o;
}

// ----------------------------------------------------------------------------
// bindings

/* vsalab.smooth_latent(x, {latent={T,H,W}, ell=, block=64, tile=,
 *   threads=}) -> x: bf16 [B, H, S, D] white noise in VSA's tile-major token
 *   order, S = block · blocks of the latent (tile: block's default tile,
 *   {4,4,4} at 64, {2,8,8} at 128), replaced in place by the correlated field
 *   of vsa_smooth_latent (src/core/vsa_lists.h). */
static int
l_smooth_latent(lua_State *L)
{
  static const char *const keys[] = {"latent", "tile", "block", "ell", "threads", NULL};
  lua_settop(L, 2);
  lua_pushvalue(L, 1); /* at 3: the caller's tensor, returned (slot 1 gets the pin) */
  vsa_tensor *x = vsa_lua_checkarg(L, 1, "x", VSA_BF16, 4);
  luaL_checktype(L, 2, LUA_TTABLE);
  vsa_arg_check_keys(L, 2, "smooth_latent", keys);
  vsa_latent lat;
  int block = block_arg(L, 2, "smooth_latent");
  int nb = latent_arg(L, 2, "smooth_latent", 1, block, &lat);
  lua_getfield(L, 2, "ell");
  if (lua_type(L, -1) != LUA_TNUMBER)
    return vsa_lua_errorf(L, "smooth_latent: field 'ell' (correlation length in latent cells) "
                             "must be a number in [0, 64]");
  double ell = lua_tonumber(L, -1);
  lua_pop(L, 1);
  if (!(ell >= 0 && ell <= 64))
    return vsa_lua_errorf(L, "smooth_latent: field 'ell' must be a number in [0, 64], got %g", ell);
  int threads = threads_arg(L, 2);
  if (x->shape[2] != (int64_t)nb * block)
    return vsa_lua_errorf(L, "x: sequence length %lld does not match latent %dx%dx%d "
                             "(%d blocks of %d = %lld tokens)", (long long)x->shape[2], lat.T,
                          lat.Hh, lat.W, nb, block, (long long)nb * block);
  if (x->shape[0] * x->shape[1] > 65535 || x->shape[3] < 1 || x->shape[3] > 4096)
    return vsa_lua_errorf(L, "x: B*H must be at most 65535 and D in [1, 4096], got shape "
                             "[%lld,%lld,%lld,%lld]", (long long)x->shape[0],
                          (long long)x->shape[1], (long long)x->shape[2], (long long)x->shape[3]);
  vsa_tensor *h = host_copy(L, x);
  if (vsa_smooth_latent(vsa_tensor_data(h), (int)(x->shape[0] * x->shape[1]),
                        (int)x->shape[3], &lat, ell, threads) != 0)
    return vsa_lua_raise(L);
  if (h != x) {
    if (vsa_tensor_copy(x, h) != 0) return vsa_lua_raise(L);
    vsa_tensor_release(h);
  }
  lua_pushvalue(L, 3);
  return 1;
}

/* vbs [n] i32 for field `name` of the table at idx, as a host pointer (the
 * host copy stays on the stack); NULL when absent. */
static const int32_t *
vbs_field(lua_State *L, int idx, const char *name, int64_t n)
{
  lua_getfield(L, idx, name);
  if (lua_isnil(L, -1)) return NULL; /* nil stays on the stack */
  int at = lua_gettop(L);
  vsa_tensor *t = vsa_arg_index(L, at, name, 1);
  int64_t want[1] = {n};
  vsa_arg_shape(L, t, name, 1, want);
  return vsa_tensor_data(host_copy(L, t));
}

/* vsalab.vsa_topk{q=, k=, topk= | density=, width=topk, block=64,
 *   latent={T,H,W} (tile=) | variable_block_sizes=, q_variable_block_sizes=,
 *   layout='bhsd', threads=} -> q2k_idx [B,H,nq,width] i32, q2k_num [B,H,nq]
 *   i32, topk, on q's device: FastVideo's selection (vsa_build_vsa_topk in
 *   src/core/vsa_lists.h), nq = Sq/block, nkv = Skv/block. q and k are
 *   [B,H,S,D] or, with layout='bshd', [B,S,H,D] (the lists are [B,H,...]
 *   either way). block defaults to the tile's volume when a tile is given.
 *   Rows with an empty (vbs = 0) block keep fewer than topk (see
 *   vsa_build_vsa_topk). */
static int
l_vsa_topk(lua_State *L)
{
  static const char *const keys[] = {"q", "k", "topk", "density", "width", "latent", "tile", "block",
                                     "variable_block_sizes", "q_variable_block_sizes",
                                     "layout", "threads", NULL};
  luaL_checktype(L, 1, LUA_TTABLE);
  vsa_arg_check_keys(L, 1, "vsa_topk", keys);
  lua_settop(L, 1);
  luaL_checkstack(L, 40, "vsa_topk");
  int layout = vsa_arg_layout(L, 1);
  lua_getfield(L, 1, "q");
  vsa_tensor *q = vsa_lua_checkarg(L, 2, "q", VSA_BF16, 4);
  lua_getfield(L, 1, "k");
  vsa_tensor *k = vsa_lua_checkarg(L, 3, "k", VSA_BF16, 4);
  vsa_arg_device(L, k, "k", q->device, "q");
  const int sd = vsa_arg_seq_dim(layout);
  int64_t B = q->shape[0], H = q->shape[3 - sd], Sq = q->shape[sd], Skv = k->shape[sd],
          D = q->shape[3];
  /* A k in the other layout (q's H where its tokens belong) is told the
   * shape it should have had; its size over B*H*D was no token count when
   * B, H or D differ ([1,4,384,32] for q's H 2 was "expected Skv 768"). */
  if (k->shape[3 - sd] != H && k->shape[sd] == H) Skv = k->shape[3 - sd];
  vsa_arg_token_shape(L, k, "k", layout, "Skv", B, H, Skv, D);
  int block = block_arg(L, 1, "vsa_topk");
  if (Sq < block || Sq % block || Skv < block || Skv % block)
    return vsa_lua_errorf(L, "vsa_topk: sequence lengths (q %lld, k %lld) must be positive "
                             "multiples of the block size %d", (long long)Sq, (long long)Skv,
                          block);
  if (B * H > 65535 || D > 4096 || Sq / block > (1 << 24) || Skv / block > (1 << 24))
    return vsa_lua_errorf(L, "vsa_topk: B*H must be at most 65535, D at most 4096, blocks at "
                             "most 2^24");
  int nq = (int)(Sq / block), nkv = (int)(Skv / block);

  lua_getfield(L, 1, "topk");
  int has_topk = !lua_isnil(L, -1);
  lua_getfield(L, 1, "density");
  int has_density = !lua_isnil(L, -1);
  lua_pop(L, 2);
  int topk;
  if (has_topk && has_density)
    return vsa_lua_errorf(L, "vsa_topk: give 'density' or 'topk', not both");
  if (has_topk) {
    topk = vsa_arg_int(L, 1, "topk", 1, 0, 0, nkv);
  } else {
    double d = vsa_arg_num(L, 1, "density", NAN);
    if (!(d > 0 && d <= 1))
      return vsa_lua_errorf(L, "vsa_topk: field 'density' must be in (0, 1] (or give 'topk')");
    topk = (int)floor(d * nkv + 0.5);
    if (topk < 1) topk = 1;
  }
  int width = vsa_arg_int(L, 1, "width", 0, topk > 0 ? topk : 1, 1, 1 << 24);
  if (width < topk)
    return vsa_lua_errorf(L, "vsa_topk: field 'width' (%d) must be >= topk (%d)", width, topk);
  int threads = threads_arg(L, 1);

  /* Block sizes: from the latent, or given, or full blocks. */
  vsa_latent lat;
  int nb = latent_arg(L, 1, "vsa_topk", 0, block, &lat);
  const int32_t *kv_vbs = vbs_field(L, 1, "variable_block_sizes", nkv);
  if (nb && kv_vbs)
    return vsa_lua_errorf(L, "vsa_topk: give 'latent' or 'variable_block_sizes', not both");
  if (nb) {
    if (nb != nkv)
      return vsa_lua_errorf(L, "vsa_topk: latent %dx%dx%d has %d blocks, k has %d", lat.T,
                            lat.Hh, lat.W, nb, nkv);
    int64_t sh[1] = {nkv};
    vsa_tensor *v = vsa_lua_newtensor(L, VSA_I32, VSA_CPU, 1, sh);
    if (vsa_build_video_blocks(lat.T, lat.Hh, lat.W, lat.tT, lat.tH, lat.tW,
                               vsa_tensor_data(v), &nb) != 0)
      return vsa_lua_raise(L);
    kv_vbs = vsa_tensor_data(v);
  }
  const int32_t *q_vbs = vbs_field(L, 1, "q_variable_block_sizes", nq);
  int64_t sq[1] = {nq}, sk[1] = {nkv};
  if (!q_vbs && kv_vbs && nq == nkv) q_vbs = kv_vbs; /* self-attention: one latent */
  if (!q_vbs) {
    vsa_tensor *v = vsa_lua_newtensor(L, VSA_I32, VSA_CPU, 1, sq);
    int32_t *p = vsa_tensor_data(v);
    for (int j = 0; j < nq; j++) p[j] = block;
    q_vbs = p;
  }
  if (!kv_vbs) {
    vsa_tensor *v = vsa_lua_newtensor(L, VSA_I32, VSA_CPU, 1, sk);
    int32_t *p = vsa_tensor_data(v);
    for (int j = 0; j < nkv; j++) p[j] = block;
    kv_vbs = p;
  }

  vsa_tensor *hq = layout == VSA_BSHD ? host_bhsd_of_bshd(L, q) : host_copy(L, q);
  vsa_tensor *hk = layout == VSA_BSHD ? host_bhsd_of_bshd(L, k) : host_copy(L, k);
  int64_t si[4] = {B, H, nq, width}, sn[3] = {B, H, nq};
  vsa_tensor *idx = vsa_lua_newtensor(L, VSA_I32, VSA_CPU, 4, si);
  int idx_at = lua_gettop(L);
  vsa_tensor *num = vsa_lua_newtensor(L, VSA_I32, VSA_CPU, 3, sn);
  int num_at = lua_gettop(L);
  if (vsa_build_vsa_topk(vsa_tensor_data(hq), vsa_tensor_data(hk), (int)(B * H), block, nq, nkv,
                         (int)D, q_vbs, kv_vbs, topk, width, vsa_tensor_data(idx),
                         vsa_tensor_data(num), threads) != 0)
    return vsa_lua_raise(L);
  if (hq != q) vsa_tensor_release(hq);
  if (hk != k) vsa_tensor_release(hk);
  vsa_arg_push_on_device(L, idx_at, q->device);
  vsa_arg_push_on_device(L, num_at, q->device);
  lua_pushinteger(L, topk);
  return 3;
}

/* vsalab.list_sharing(q2k_idx, q2k_num, num_kv_blocks) -> sharing (nil
 *   when no kv block with a partner is selected), counted: the mean over
 *   (b, h, kv block j) of |k2q(j) ∩ k2q(j xor 1)| / |k2q(j)|
 *   (vsa_list_sharing in src/core/vsa_lists.h). */
static int
l_list_sharing(lua_State *L)
{
  lua_settop(L, 3);
  /* An i64 list is kept (pinned, at 4) until its entries are checked: one
   * no i32 holds is reported as itself, not as the clamped 2147483647. */
  vsa_tensor *orig = luaL_testudata(L, 1, VSA_TENSOR_MT);
  if (orig && orig->st && orig->dtype == VSA_I64) {
    lua_pushvalue(L, 1);
    orig = vsa_lua_pin(L, -1, "q2k_idx");
  } else {
    orig = NULL;
  }
  vsa_tensor *idx = vsa_arg_index(L, 1, "q2k_idx", 4);
  vsa_tensor *num = vsa_arg_index(L, 2, "q2k_num", 3);
  int64_t want[3] = {idx->shape[0], idx->shape[1], idx->shape[2]};
  vsa_arg_shape(L, num, "q2k_num", 3, want);
  vsa_arg_device(L, num, "q2k_num", idx->device, "q2k_idx");
  if (orig) vsa_arg_check_i64_entries(L, orig, num, "q2k_idx");
  lua_Number n = luaL_checknumber(L, 3);
  luaL_argcheck(L, n == floor(n) && n >= 1 && n <= (1 << 24), 3,
                "num_kv_blocks must be an integer in [1, 2^24]");
  if (idx->shape[3] < 1 || idx->shape[2] < 1 || idx->shape[0] * idx->shape[1] < 1)
    return vsa_lua_errorf(L, "q2k_idx: expected a non-empty [B,H,nq,width] tensor");
  if (idx->shape[0] * idx->shape[1] > 65535 || idx->shape[2] > (1 << 24) ||
      idx->shape[3] > (1 << 24))
    return vsa_lua_errorf(L, "q2k_idx: B*H must be at most 65535, nq and width at most 2^24");
  lua_settop(L, 3);
  vsa_tensor *hi = host_copy(L, idx);
  vsa_tensor *hn = host_copy(L, num);
  double s;
  int64_t counted;
  if (vsa_list_sharing(vsa_tensor_data(hi), vsa_tensor_data(hn),
                       (int)(idx->shape[0] * idx->shape[1]), (int)idx->shape[2],
                       (int)idx->shape[3], (int)n, &s, &counted) != 0)
    return vsa_lua_raise(L);
  if (counted > 0) lua_pushnumber(L, s);
  else lua_pushnil(L);
  lua_pushnumber(L, (lua_Number)counted);
  return 2;
}

static const luaL_Reg functions[] = {
    {"smooth_latent", l_smooth_latent}, {"vsa_topk", l_vsa_topk},
    {"list_sharing", l_list_sharing}, {NULL, NULL}};

void
vsa_lua_open_vsa_lists(lua_State *L)
{
  luaL_register(L, NULL, functions);
}
