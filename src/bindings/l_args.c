/* l_args.c — argument checks shared by the Lua bindings (declared in
 * l_args.h). Every check raises a Lua error naming the argument and what
 * was expected.
 */
#include "l_args.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "check.h"

// ----------------------------------------------------------------------------
// argument helpers

void
vsa_arg_fmt_shape(const int64_t *s, int n, char *buf, size_t len)
{
  size_t k = snprintf(buf, len, "[");
  for (int d = 0; d < n && k < len; d++)
    k += snprintf(buf + k, len - k, d ? ",%lld" : "%lld", (long long)s[d]);
  if (k < len) snprintf(buf + k, len - k, "]");
}

/* Raise "<name>: expected shape [..], got [..]" unless t has that shape. */
void
vsa_arg_shape(lua_State *L, const vsa_tensor *t, const char *name, int n,
             const int64_t *want)
{
  int ok = t->ndim == n;
  for (int d = 0; ok && d < n; d++) ok = t->shape[d] == want[d];
  if (ok) return;
  char a[128], b[128];
  vsa_arg_fmt_shape(want, n, a, sizeof a);
  vsa_arg_fmt_shape(t->shape, t->ndim, b, sizeof b);
  vsa_lua_errorf(L, "%s: expected shape %s, got %s", name, a, b);
}

int
vsa_arg_layout(lua_State *L, int idx)
{
  if (!lua_istable(L, idx)) return VSA_BHSD;
  lua_getfield(L, idx, "layout");
  int layout = VSA_BHSD;
  if (!lua_isnil(L, -1)) {
    if (lua_type(L, -1) != LUA_TSTRING)
      vsa_lua_errorf(L, "layout: expected 'bhsd' or 'bshd', got a %s", luaL_typename(L, -1));
    layout = vsa_layout_parse(lua_tostring(L, -1));
    if (layout < 0)
      vsa_lua_errorf(L, "layout: '%s' is not supported (supported: bhsd, bshd)",
                     lua_tostring(L, -1));
  }
  lua_pop(L, 1);
  return layout;
}

int
vsa_arg_seq_dim(int layout)
{
  return layout == VSA_BSHD ? 1 : 2;
}

void
vsa_arg_layout_shape(int layout, int64_t B, int64_t H, int64_t S, int64_t D, int64_t out[4])
{
  out[0] = B;
  out[vsa_arg_seq_dim(layout)] = S;
  out[3 - vsa_arg_seq_dim(layout)] = H;
  out[3] = D;
}

void
vsa_arg_token_shape(lua_State *L, const vsa_tensor *t, const char *name, int layout,
                    const char *sname, int64_t B, int64_t H, int64_t S, int64_t D)
{
  int64_t want[4];
  vsa_arg_layout_shape(layout, B, H, S, D, want);
  int ok = t->ndim == 4;
  for (int d = 0; ok && d < 4; d++) ok = t->shape[d] == want[d];
  if (ok) return;
  char a[128], b[128], dims[32];
  vsa_arg_fmt_shape(want, 4, a, sizeof a);
  vsa_arg_fmt_shape(t->shape, t->ndim, b, sizeof b);
  snprintf(dims, sizeof dims, layout == VSA_BSHD ? "[B,%s,H,D]" : "[B,H,%s,D]", sname);
  vsa_lua_errorf(L, "%s: shape %s does not match layout %s %s = %s", name, b,
                 vsa_layout_name(layout), dims, a);
}

void
vsa_arg_device(lua_State *L, const vsa_tensor *t, const char *name, int dev,
              const char *ref)
{
  if (t->device == dev) return;
  vsa_lua_errorf(L, "%s: on %s%s, but %s is on %s%s", name,
             t->device == VSA_CPU ? "cpu" : "cuda:",
             t->device == VSA_CPU ? "" : lua_pushfstring(L, "%d", t->device),
             ref, dev == VSA_CPU ? "cpu" : "cuda:",
             dev == VSA_CPU ? "" : lua_pushfstring(L, "%d", dev));
}

void
vsa_arg_check_i64_fits(lua_State *L, const vsa_tensor *t64, const char *name)
{
  int top = lua_gettop(L);
  const vsa_tensor *h = t64;
  /* Read on the host, in flat order: a contiguous host copy when needed. */
  if (t64->device != VSA_CPU || !vsa_tensor_is_contiguous(t64)) {
    vsa_tensor *c = vsa_lua_newtensor(L, VSA_I64, VSA_CPU, t64->ndim, t64->shape);
    if (vsa_tensor_copy(c, t64) != 0) vsa_lua_raise(L);
    h = c;
  }
  const int64_t *v = vsa_tensor_data(h);
  for (int64_t i = 0, n = vsa_tensor_numel(h); i < n; i++)
    if (v[i] < INT32_MIN || v[i] > INT32_MAX)
      vsa_lua_errorf(L, "%s: the entry at flat index %lld (0-based) is %lld, not a 32-bit value", name, (long long)i,
                     (long long)v[i]);
  lua_settop(L, top);
}

/* An index tensor argument: i32 as is, i64 converted to a new i32 tensor
 * (pushed on the stack, kept alive by it). */
vsa_tensor *
vsa_arg_index(lua_State *L, int idx, const char *name, int ndim)
{
  vsa_tensor *t = luaL_testudata(L, idx, VSA_TENSOR_MT);
  if (t && t->st && t->dtype == VSA_I64) {
    t = vsa_lua_checkarg(L, idx, name, VSA_I64, ndim); /* pinned */
    /* Counts and sizes (1-D, 3-D) must fit as they are: the conversion
     * saturates, and 2^40 would be reported as 2147483647. A 4-D list's
     * padding may hold anything; its entries are checked against the
     * counts (vsa_arg_check_i64_entries). */
    if (ndim != 4) vsa_arg_check_i64_fits(L, t, name);
    vsa_tensor *c = vsa_lua_newtensor(L, VSA_I32, t->device, t->ndim, t->shape);
    if (vsa_tensor_convert(c, t) != 0) vsa_lua_raise(L);
    lua_replace(L, idx);
    return c;
  }
  return vsa_lua_checkarg(L, idx, name, VSA_I32, ndim);
}

void
vsa_arg_check_i64_entries(lua_State *L, const vsa_tensor *idx64, const vsa_tensor *num,
                          const char *name)
{
  int top = lua_gettop(L);
  const vsa_tensor *hi = idx64, *hn = num;
  if (idx64->device != VSA_CPU) {
    vsa_tensor *c = vsa_lua_newtensor(L, VSA_I64, VSA_CPU, idx64->ndim, idx64->shape);
    if (vsa_tensor_copy(c, idx64) != 0) vsa_lua_raise(L);
    hi = c;
  }
  if (num->device != VSA_CPU) {
    vsa_tensor *c = vsa_lua_newtensor(L, VSA_I32, VSA_CPU, num->ndim, num->shape);
    if (vsa_tensor_copy(c, num) != 0) vsa_lua_raise(L);
    hn = c;
  }
  const int64_t *v = vsa_tensor_data(hi);
  const int32_t *n = vsa_tensor_data(hn);
  int64_t rows = vsa_tensor_numel(hn), width = idx64->shape[idx64->ndim - 1];
  int64_t H = idx64->shape[1], R = idx64->shape[2];
  for (int64_t r = 0; r < rows; r++) {
    int64_t cnt = n[r] < 0 ? 0 : n[r] > width ? width : n[r]; /* counts are checked later */
    for (int64_t e = 0; e < cnt; e++) {
      int64_t x = v[r * width + e];
      if (x < INT32_MIN || x > INT32_MAX)
        vsa_lua_errorf(L, "%s: index %lld out of range (not a 32-bit block id) at (b=%lld, h=%lld, row=%lld)",
                       name, (long long)x, (long long)(r / R / H), (long long)(r / R % H),
                       (long long)(r % R));
    }
  }
  lua_settop(L, top);
}

int
vsa_arg_int(lua_State *L, int idx, const char *k, int required, long long def,
          long long lo, long long hi)
{
  lua_getfield(L, idx, k);
  long long v = def;
  if (lua_isnil(L, -1)) {
    if (required) vsa_lua_errorf(L, "field '%s' is required", k);
  } else {
    lua_Number n = lua_tonumber(L, -1);
    if (lua_type(L, -1) != LUA_TNUMBER || n != floor(n) || n < lo || n > hi)
      vsa_lua_errorf(L, "field '%s' must be an integer in [%lld, %lld]", k, lo, hi);
    v = (long long)n;
  }
  lua_pop(L, 1);
  return (int)v;
}

int
vsa_arg_block(lua_State *L, int idx, const char *fn, int def)
{
  lua_getfield(L, idx, "block");
  int v = def;
  if (!lua_isnil(L, -1)) {
    lua_Number n = lua_tonumber(L, -1);
    if (lua_type(L, -1) != LUA_TNUMBER)
      vsa_lua_errorf(L, "%s: field 'block' must be a supported block size (%s), got a %s", fn,
                     vsa_block_sizes_text(), luaL_typename(L, -1));
    if (n != floor(n) || !(n >= 1 && n <= 1 << 20) || !vsa_block_supported((int)n))
      vsa_lua_errorf(L, "%s: field 'block' must be a supported block size (%s), got %g", fn,
                     vsa_block_sizes_text(), (double)n);
    v = (int)n;
  }
  lua_pop(L, 1);
  return v;
}

int
vsa_arg_block_of_vbs(lua_State *L, int64_t Skv, int64_t nvbs)
{
  if (nvbs >= 1 && Skv % nvbs == 0 && Skv / nvbs <= VSA_BLOCK_MAX &&
      vsa_block_supported((int)(Skv / nvbs)))
    return (int)(Skv / nvbs);
  /* "expected shape [6] (block 64) or [3] (block 128) for Skv 384" */
  char want[256];
  int at = 0;
  for (int i = 0; i < vsa_n_block_sizes && at < (int)sizeof want; i++) {
    int b = vsa_block_table[i].block;
    if (Skv % b) continue;
    at += snprintf(want + at, sizeof want - (size_t)at, "%s[%lld] (block %d)", at ? " or " : "",
                   (long long)(Skv / b), b);
  }
  if (!at) snprintf(want, sizeof want, "[Skv/block] for a block size of %s", vsa_block_sizes_text());
  vsa_lua_errorf(L, "variable_block_sizes: expected shape %s for Skv %lld, got [%lld]", want,
                 (long long)Skv, (long long)nvbs);
  return 0;
}

double
vsa_arg_num(lua_State *L, int idx, const char *k, double def)
{
  lua_getfield(L, idx, k);
  double v = def;
  if (!lua_isnil(L, -1)) {
    if (lua_type(L, -1) != LUA_TNUMBER)
      vsa_lua_errorf(L, "field '%s' must be a number", k);
    v = lua_tonumber(L, -1);
  }
  lua_pop(L, 1);
  return v;
}

int
vsa_arg_bool(lua_State *L, int idx, const char *fn, const char *k, int def)
{
  lua_getfield(L, idx, k);
  int v = def;
  if (lua_isboolean(L, -1)) {
    v = lua_toboolean(L, -1);
  } else if (lua_type(L, -1) == LUA_TNUMBER && (lua_tonumber(L, -1) == 0 || lua_tonumber(L, -1) == 1)) {
    v = lua_tonumber(L, -1) != 0; /* sweep axes and key=value options give 0/1 */
  } else if (!lua_isnil(L, -1)) {
    vsa_lua_errorf(L, "%s: field '%s' must be a boolean (true or false, or 0/1), got %s", fn, k,
                   luaL_typename(L, -1));
  }
  lua_pop(L, 1);
  return v;
}

/* Device from field 'device' ("cpu", "cuda", "cuda:N"); default cpu. */
int
vsa_arg_field_device(lua_State *L, int idx)
{
  lua_getfield(L, idx, "device");
  int dev = VSA_CPU;
  if (!lua_isnil(L, -1)) {
    const char *s = lua_tostring(L, -1);
    int n;
    char tail;
    if (s && strcmp(s, "cpu") == 0) dev = VSA_CPU;
    else if (s && strcmp(s, "cuda") == 0) dev = vsa_lua_current_device();
    else if (s && sscanf(s, "cuda:%d%c", &n, &tail) == 1 && n >= 0) dev = n;
    else vsa_lua_errorf(L, "field 'device' must be 'cpu', 'cuda' or 'cuda:N'");
  }
  lua_pop(L, 1);
  return dev;
}

/* Copy host tensor h into a new tensor on dev (h itself when dev is cpu);
 * the result is left on top of the stack. */
vsa_tensor *
vsa_arg_push_on_device(lua_State *L, int h_idx, int dev)
{
  vsa_tensor *h = lua_touserdata(L, h_idx);
  if (dev == VSA_CPU) {
    lua_pushvalue(L, h_idx);
    return h;
  }
  vsa_tensor *d = vsa_lua_newtensor(L, h->dtype, dev, h->ndim, h->shape);
  if (vsa_tensor_copy(d, h) != 0) vsa_lua_raise(L);
  return d;
}

void
vsa_arg_raise_cuda(lua_State *L, cudaError_t e, const char *what)
{
  vsa_fail_cuda(e, what, __FILE__, __LINE__);
  vsa_lua_raise(L);
}
