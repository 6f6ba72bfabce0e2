/* l_check.c — Lua bindings that judge outputs: the fp64 oracle
 * (src/core/oracle.c) and compare (relative L2, max abs, NaN/Inf counts; on the
 * GPU through kernels/compare.cu). Argument checks come from l_args.h.
 */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "device.h"
#include "l_args.h"
#include "l_memory.h"
#include "l_tensor.h"

// ----------------------------------------------------------------------------
// fp64 oracle

/* Field k of table idx as a contiguous f64 CPU tensor (pushed); NULL when
 * absent and optional. */
static vsa_tensor *
field_f64(lua_State *L, int idx, const char *k, int required)
{
  lua_getfield(L, idx, k);
  if (lua_isnil(L, -1)) {
    if (required) vsa_lua_errorf(L, "field '%s' is required", k);
    lua_pop(L, 1);
    return NULL;
  }
  vsa_tensor *t = luaL_testudata(L, -1, VSA_TENSOR_MT);
  if (!t) vsa_lua_errorf(L, "field '%s' must be a tensor", k);
  if (!t->st) vsa_lua_errorf(L, "field '%s': tensor was freed", k);
  t = vsa_lua_pin(L, -1, k);
  if (t->dtype == VSA_I32 || t->dtype == VSA_I64)
    vsa_lua_errorf(L, "field '%s': expected a float dtype, got %s", k, vsa_dtype_name(t->dtype));
  vsa_tensor *h = vsa_lua_newtensor(L, VSA_F64, VSA_CPU, t->ndim, t->shape);
  if (t->device != VSA_CPU) {
    vsa_tensor *c = vsa_lua_newtensor(L, t->dtype, VSA_CPU, t->ndim, t->shape);
    if (vsa_tensor_copy(c, t) != 0) vsa_lua_raise(L);
    if (vsa_tensor_convert(h, c) != 0) vsa_lua_raise(L);
    lua_pop(L, 1);
  } else if (vsa_tensor_convert(h, t) != 0) {
    vsa_lua_raise(L);
  }
  lua_remove(L, -2);
  return h;
}

static vsa_tensor *
field_i32_host(lua_State *L, int idx, const char *k)
{
  lua_getfield(L, idx, k);
  vsa_tensor *t = luaL_testudata(L, -1, VSA_TENSOR_MT);
  if (!t) vsa_lua_errorf(L, "field '%s' must be a tensor", k);
  if (!t->st) vsa_lua_errorf(L, "field '%s': tensor was freed", k);
  t = vsa_lua_pin(L, -1, k);
  if (t->dtype != VSA_I32 && t->dtype != VSA_I64)
    vsa_lua_errorf(L, "field '%s': expected dtype i32 or i64, got %s", k, vsa_dtype_name(t->dtype));
  vsa_tensor *h = vsa_lua_newtensor(L, VSA_I32, VSA_CPU, t->ndim, t->shape);
  if (t->dtype == VSA_I32) {
    if (vsa_tensor_copy(h, t) != 0) vsa_lua_raise(L);
  } else {
    /* Counts and sizes must fit as they are (the conversion saturates);
     * q2k_idx's entries are checked against the counts in l_oracle. */
    if (t->ndim != 4) vsa_arg_check_i64_fits(L, t, k);
    vsa_tensor *c = vsa_lua_newtensor(L, t->dtype, VSA_CPU, t->ndim, t->shape);
    if (vsa_tensor_copy(c, t) != 0 || vsa_tensor_convert(h, c) != 0)
      vsa_lua_raise(L);
    lua_pop(L, 1);
  }
  lua_remove(L, -2);
  return h;
}

/* Optional list of 0-based integers in field k -> malloc'd array (count in
 * *n, -1 when absent). Kept alive as a userdata on the stack. */
static int32_t *
field_ids(lua_State *L, int idx, const char *k, int *n, int limit)
{
  lua_getfield(L, idx, k);
  if (lua_isnil(L, -1)) {
    lua_pop(L, 1);
    *n = -1;
    lua_pushnil(L);
    return NULL;
  }
  if (!lua_istable(L, -1)) vsa_lua_errorf(L, "field '%s' must be a list of ids", k);
  /* A list, not any table: {0, nil, 2} has a border at 1 or 3 (lua_objlen
   * may give either), so count the keys and require exactly 1..m. An empty
   * list would check nothing: absent means "all", so {} is an error. */
  int m = (int)lua_objlen(L, -1), keys = 0;
  for (lua_pushnil(L); lua_next(L, -2); lua_pop(L, 1)) keys++;
  if (m < 1 || keys != m)
    vsa_lua_errorf(L, "field '%s' must be a non-empty list of ids {i1, i2, ...} without holes "
                   "(leave it out to take all)", k);
  int32_t *ids = lua_newuserdata(L, sizeof(int32_t) * (m > 0 ? m : 1));
  for (int i = 0; i < m; i++) {
    lua_rawgeti(L, -2, i + 1);
    lua_Number v = lua_tonumber(L, -1);
    if (lua_type(L, -1) != LUA_TNUMBER || v != floor(v) || v < 0 || v >= limit)
      vsa_lua_errorf(L, "field '%s': entry %d must be an id in [0, %d)", k, i + 1, limit);
    ids[i] = (int32_t)v;
    lua_pop(L, 1);
  }
  lua_remove(L, -2);
  *n = m;
  return ids;
}

/* Token tensors are [B,H,S,D] (layout='bhsd', the default) or [B,S,H,D]
 * (layout='bshd'), the results in the same layout; lse stays [B,H,Sq].
 * vsalab.oracle{q=, k=, v=, dO=, q2k_idx=, q2k_num=, variable_block_sizes=,
 *   o=?, lse=?, sm_scale=?, bh=?, q_blocks=?, kv_blocks=?}
 *   -> {o=, lse=, dq=, dk=, dv=}: f64 CPU tensors (dq, dk include sm_scale).
 * fp64 brute force on the host (src/core/oracle.c). With o/lse given it computes
 * the backward of those (the backward's contract) and returns them as its
 * o/lse (f64 copies); otherwise its own forward. sm_scale in [1e-30, 1e30].
 * The block size is Skv / #variable_block_sizes (64 or 128); q_blocks and
 * kv_blocks count blocks of that size. bh (0-based b*H+h), q_blocks and kv_blocks restrict the work to
 * a spot check; rows not produced stay NaN. */
static int
l_oracle(lua_State *L)
{
  static const char *const keys[] = {"q", "k", "v", "dO", "o", "lse", "q2k_idx", "q2k_num", "variable_block_sizes", "sm_scale", "bh", "q_blocks", "kv_blocks", "layout", NULL};
  vsa_arg_check_keys(L, 1, "oracle", keys);
  luaL_checktype(L, 1, LUA_TTABLE);
  lua_settop(L, 1);
  vsa_tensor *q = field_f64(L, 1, "q", 1);
  vsa_tensor *k = field_f64(L, 1, "k", 1);
  vsa_tensor *v = field_f64(L, 1, "v", 1);
  vsa_tensor *dO = field_f64(L, 1, "dO", 1);
  vsa_tensor *o = field_f64(L, 1, "o", 0);
  vsa_tensor *lse = field_f64(L, 1, "lse", 0);
  if ((o == NULL) != (lse == NULL))
    return vsa_lua_errorf(L, "fields 'o' and 'lse' go together");
  vsa_tensor *idx = field_i32_host(L, 1, "q2k_idx");
  vsa_tensor *num = field_i32_host(L, 1, "q2k_num");
  vsa_tensor *vbs = field_i32_host(L, 1, "variable_block_sizes");
  /* Read after the tensors: the table's __index may free one of them. */
  const int layout = vsa_arg_layout(L, 1);
  const int sd = vsa_arg_seq_dim(layout), hd = 3 - sd;
  if (q->ndim != 4 || k->ndim != 4 || v->ndim != 4 || dO->ndim != 4)
    return vsa_lua_errorf(L, "q, k, v, dO must be [B,H,S,D] (layout bhsd) or [B,S,H,D] (bshd)");
  attn_dims d = {q->shape[0], q->shape[hd], q->shape[sd], k->shape[sd], q->shape[3], VSA_CPU, 0,
                 layout};
  if (d.D < 1)
    return vsa_lua_errorf(L, "q: head dim D must be at least 1, got %lld", (long long)d.D);
  /* oracle.c counts heads, rows and D in int. */
  if (d.B * d.H > INT_MAX || d.Sq > INT_MAX || k->shape[sd] > INT_MAX || d.D > INT_MAX)
    return vsa_lua_errorf(L, "q, k: B*H, Sq, Skv and D must each be at most %d for the oracle",
                          INT_MAX);
  vsa_arg_token_shape(L, k, "k", layout, "Skv", d.B, d.H, d.Skv, d.D);
  if (o) vsa_arg_token_shape(L, o, "o", layout, "Sq", d.B, d.H, d.Sq, d.D);
  if (lse) {
    int64_t wl[3] = {d.B, d.H, d.Sq};
    vsa_arg_shape(L, lse, "lse", 3, wl);
  }
  /* Tensors of the other layout read as other dims: name the layout. */
  const char *as = layout == VSA_BSHD ? "layout bshd [B,S,H,D]" : "layout bhsd [B,H,S,D]";
  if (d.Sq % 64 || d.Sq < 1)
    return vsa_lua_errorf(L, "q: sequence length %lld (dim %d, %s) is not a positive multiple of 64",
                          (long long)d.Sq, sd + 1, as);
  if (d.Skv % 64 || d.Skv < 1)
    return vsa_lua_errorf(L, "k: sequence length %lld (dim %d, %s) is not a positive multiple of 64",
                          (long long)d.Skv, sd + 1, as);
  vsa_arg_token_shape(L, dO, "dO", layout, "Sq", d.B, d.H, d.Sq, d.D);
  vsa_arg_token_shape(L, v, "v", layout, "Skv", d.B, d.H, d.Skv, d.D);
  if (vbs->ndim != 1)
    return vsa_lua_errorf(L, "variable_block_sizes: expected a 1-d tensor [Skv/block]");
  /* The block size: Skv / #variable_block_sizes (bsa.h). */
  d.block = vsa_arg_block_of_vbs(L, d.Skv, vbs->shape[0]);
  if (d.Sq % d.block)
    return vsa_lua_errorf(L, "q: sequence length %lld is not a multiple of the block size %d "
                          "(from variable_block_sizes)", (long long)d.Sq, d.block);
  int64_t wn[3] = {d.B, d.H, d.Sq / d.block}, wv[1] = {d.Skv / d.block};
  vsa_arg_shape(L, num, "q2k_num", 3, wn);
  vsa_arg_shape(L, vbs, "variable_block_sizes", 1, wv);
  if (idx->ndim != 4 || idx->shape[0] != d.B || idx->shape[1] != d.H ||
      idx->shape[2] != wn[2] || idx->shape[3] < 1)
    return vsa_lua_errorf(L, "q2k_idx: expected [B,H,nq,width] = [%lld,%lld,%lld,w]",
                          (long long)d.B, (long long)d.H, (long long)wn[2]);
  /* An i64 q2k_idx: an entry past i32 is named as itself, not as the
   * saturated 2147483647 its conversion holds. */
  lua_getfield(L, 1, "q2k_idx");
  const vsa_tensor *idx64 = luaL_testudata(L, -1, VSA_TENSOR_MT);
  if (idx64 && idx64->st && idx64->dtype == VSA_I64 && idx64->ndim == 4 &&
      idx64->shape[0] == d.B && idx64->shape[1] == d.H && idx64->shape[2] == wn[2])
    vsa_arg_check_i64_entries(L, idx64, num, "q2k_idx");
  lua_pop(L, 1);
  vsa_oracle_args a = {0};
  a.B = (int)d.B; a.H = (int)d.H; a.Sq = (int)d.Sq; a.Skv = (int)d.Skv; a.D = (int)d.D;
  a.block = d.block;
  a.layout = layout;
  a.sm_scale = vsa_arg_num(L, 1, "sm_scale", 1.0 / sqrt((double)d.D));
  /* The kernels' range: beyond it logits overflow even in fp64 and rows
   * come out inf/NaN instead of an error. */
  if (!(a.sm_scale >= 1e-30 && a.sm_scale <= 1e30))
    return vsa_lua_errorf(L, "oracle: field 'sm_scale' must be a number in [1e-30, 1e30], got %g",
                          isnan(a.sm_scale) ? NAN : a.sm_scale); /* nan, not glibc's -nan */
  a.q = vsa_tensor_data(q); a.k = vsa_tensor_data(k); a.v = vsa_tensor_data(v);
  a.dO = vsa_tensor_data(dO);
  a.o_in = o ? vsa_tensor_data(o) : NULL;
  a.lse_in = lse ? vsa_tensor_data(lse) : NULL;
  a.q2k_idx = vsa_tensor_data(idx); a.q2k_num = vsa_tensor_data(num);
  a.q2k_width = (int)idx->shape[3];
  a.vbs = vsa_tensor_data(vbs);
  a.bh_list = field_ids(L, 1, "bh", &a.n_bh, (int)(d.B * d.H));
  a.q_blocks = field_ids(L, 1, "q_blocks", &a.n_q_blocks, (int)wn[2]);
  a.kv_blocks = field_ids(L, 1, "kv_blocks", &a.n_kv_blocks, (int)wv[0]);
  int64_t so[4], sk[4], sl[3] = {d.B, d.H, d.Sq};
  vsa_arg_layout_shape(layout, d.B, d.H, d.Sq, d.D, so);
  vsa_arg_layout_shape(layout, d.B, d.H, d.Skv, d.D, sk);
  lua_newtable(L);
  const char *names[5] = {"o", "lse", "dq", "dk", "dv"};
  vsa_tensor *outs[5];
  for (int i = 0; i < 5; i++) {
    outs[i] = vsa_lua_newtensor(L, VSA_F64, VSA_CPU, i == 1 ? 3 : 4,
                                i == 1 ? sl : (i >= 3 ? sk : so));
    /* The fill polls for a stop: a point timeout met here ends the call. */
    if (vsa_tensor_fill(outs[i], NAN) != 0) return vsa_lua_raise(L);
    lua_setfield(L, -2, names[i]);
  }
  if (vsa_oracle(&a, vsa_tensor_data(outs[0]), vsa_tensor_data(outs[1]),
                 vsa_tensor_data(outs[2]), vsa_tensor_data(outs[3]),
                 vsa_tensor_data(outs[4])) != 0)
    return vsa_lua_raise(L);
  /* Given a forward, the result's o and lse are that forward (as f64),
   * not NaN placeholders. */
  if (o && (vsa_tensor_copy(outs[0], o) != 0 || vsa_tensor_copy(outs[1], lse) != 0))
    return vsa_lua_raise(L);
  return 1;
}

// ----------------------------------------------------------------------------
// comparison

/* vsalab.compare(x, ref) -> {rel_l2, max_abs, norm_ratio, nonfinite,
 *   nonfinite_x, nonfinite_ref, n}; any float dtypes, same shape; tensors on
 * different devices are compared on the host. rel_l2 = ‖x−ref‖/‖ref‖ (‖x‖
 * when ref is all zero); sums in fp64. */
static int
l_compare(lua_State *L)
{
  vsa_lua_checktensor(L, 1);
  vsa_lua_checktensor(L, 2);
  vsa_tensor *x = vsa_lua_pin(L, 1, "compare: x");
  vsa_tensor *r = vsa_lua_pin(L, 2, "compare: ref");
  if (x->dtype == VSA_I32 || x->dtype == VSA_I64 || r->dtype == VSA_I32 ||
      r->dtype == VSA_I64)
    return vsa_lua_errorf(L, "compare: expected float tensors, got %s and %s",
                      vsa_dtype_name(x->dtype), vsa_dtype_name(r->dtype));
  vsa_arg_shape(L, x, "compare: x", r->ndim, r->shape);
  int64_t n = vsa_tensor_numel(x);
  vsa_compare_sums s = {0};
  if (x->device != VSA_CPU && x->device == r->device &&
      vsa_tensor_is_contiguous(x) && vsa_tensor_is_contiguous(r)) {
    vsa_device_scratch(L, x->device, 0);
    cudaError_t e = cudaMemset(vsa_d_compare_sums, 0, sizeof s);
    if (e == cudaSuccess)
      e = vsa_compare(vsa_tensor_data(x), x->dtype, vsa_tensor_data(r),
                      r->dtype, n, vsa_d_compare_sums, vsa_stream());
    if (e == cudaSuccess)
      e = cudaMemcpy(&s, vsa_d_compare_sums, sizeof s, cudaMemcpyDeviceToHost);
    if (e != cudaSuccess) vsa_arg_raise_cuda(L, e, "compare");
  } else {
    vsa_tensor *hx = vsa_lua_newtensor(L, x->dtype, VSA_CPU, x->ndim, x->shape);
    vsa_tensor *hr = vsa_lua_newtensor(L, r->dtype, VSA_CPU, r->ndim, r->shape);
    if (vsa_tensor_copy(hx, x) != 0 || vsa_tensor_copy(hr, r) != 0)
      return vsa_lua_raise(L);
    vsa_compare_cpu(vsa_tensor_data(hx), hx->dtype, vsa_tensor_data(hr),
                    hr->dtype, n, &s);
  }
  /* Finite values beyond ~1e154 overflow the sums of squares (rel L2 would
   * read inf/inf = NaN with nothing non-finite): compare again on the host
   * with both sides scaled by one power of two, exact, and scale max_abs
   * back. The returned raw sums stay unscaled (inf), so pooling them fails
   * rather than passes. */
  double scale = 0;
  if (!(isfinite(s.diff2) && isfinite(s.ref2) && isfinite(s.x2)) && s.nonfinite_x == 0 &&
      s.nonfinite_ref == 0) {
    vsa_tensor *hx = vsa_lua_newtensor(L, VSA_F64, VSA_CPU, x->ndim, x->shape);
    vsa_tensor *hr = vsa_lua_newtensor(L, VSA_F64, VSA_CPU, r->ndim, r->shape);
    vsa_tensor *cx = vsa_lua_newtensor(L, x->dtype, VSA_CPU, x->ndim, x->shape);
    vsa_tensor *cr = vsa_lua_newtensor(L, r->dtype, VSA_CPU, r->ndim, r->shape);
    if (vsa_tensor_copy(cx, x) != 0 || vsa_tensor_copy(cr, r) != 0 ||
        vsa_tensor_convert(hx, cx) != 0 || vsa_tensor_convert(hr, cr) != 0)
      return vsa_lua_raise(L);
    double *px = vsa_tensor_data(hx), *pr = vsa_tensor_data(hr), m = 0;
    for (int64_t i = 0; i < n; i++) {
      if (fabs(px[i]) > m) m = fabs(px[i]);
      if (fabs(pr[i]) > m) m = fabs(pr[i]);
    }
    int e;
    frexp(m, &e);
    for (int64_t i = 0; i < n; i++) {
      px[i] = ldexp(px[i], -e);
      pr[i] = ldexp(pr[i], -e);
    }
    vsa_compare_sums t = {0};
    vsa_compare_cpu(px, VSA_F64, pr, VSA_F64, n, &t);
    scale = ldexp(1.0, e);
    t.max_abs *= scale;
    s.max_abs = t.max_abs;
    double nr = sqrt(t.ref2), nx = sqrt(t.x2), nd = sqrt(t.diff2);
    lua_newtable(L);
    lua_pushnumber(L, nr > 0 ? nd / nr : nd * scale);
    lua_setfield(L, -2, "rel_l2");
    lua_pushnumber(L, nr > 0 ? nx / nr : (nx > 0 ? INFINITY : 1.0));
    lua_setfield(L, -2, "norm_ratio");
  } else {
    lua_newtable(L);
  }
  double nr = sqrt(s.ref2), nx = sqrt(s.x2), nd = sqrt(s.diff2);
  if (scale == 0) {
    lua_pushnumber(L, nr > 0 ? nd / nr : nd);
    lua_setfield(L, -2, "rel_l2");
    lua_pushnumber(L, nr > 0 ? nx / nr : (nx > 0 ? INFINITY : 1.0));
    lua_setfield(L, -2, "norm_ratio");
  }
  lua_pushnumber(L, s.max_abs);
  lua_setfield(L, -2, "max_abs");
  lua_pushnumber(L, (lua_Number)(s.nonfinite_x + s.nonfinite_ref));
  lua_setfield(L, -2, "nonfinite");
  lua_pushnumber(L, (lua_Number)s.nonfinite_x);
  lua_setfield(L, -2, "nonfinite_x");
  lua_pushnumber(L, (lua_Number)s.nonfinite_ref);
  lua_setfield(L, -2, "nonfinite_ref");
  lua_pushnumber(L, (lua_Number)n);
  lua_setfield(L, -2, "n");
  /* Raw sums, so callers can pool several comparisons into one rel L2. */
  lua_pushnumber(L, s.diff2);
  lua_setfield(L, -2, "diff2");
  lua_pushnumber(L, s.ref2);
  lua_setfield(L, -2, "ref2");
  lua_pushnumber(L, s.x2);
  lua_setfield(L, -2, "x2");
  return 1;
}

static const luaL_Reg functions[] = {
    {"oracle", l_oracle}, {"compare", l_compare}, {NULL, NULL}};

void
vsa_lua_open_check(lua_State *L)
{
  luaL_register(L, NULL, functions);
}
