/* l_tensor.c — the vsa.Tensor Lua class over the C tensor core (tensor.h).
 *
 * Lua conventions: dimensions and positions given to narrow/select/get/set
 * are 1-based (Lua's and Torch7's habit); the *contents* of index tensors
 * (q2k_idx, k2q_idx) are 0-based block ids, as the kernels read them.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "device.h"
#include "l_memory.h"
#include "l_tensor.h"
#include "lua_api.h"

static int current_device = 0;
static int cuda_state = 0; /* 0 unknown, 1 usable, -1 not usable */
static char cuda_why[512];

int vsa_lua_current_device(void) { return current_device; }
void vsa_lua_set_current_device(int device) { current_device = device; }

void
vsa_lua_require_cuda(lua_State *L)
{
  if (cuda_state == 0) {
    int n;
    if (vsa_device_count(&n) != 0) {
      cuda_state = -1;
      snprintf(cuda_why, sizeof cuda_why, "%s", vsa_last_error());
    } else if (current_device >= n) {
      cuda_state = -1;
      snprintf(cuda_why, sizeof cuda_why,
               "no CUDA device %d (this machine has %d)", current_device, n);
    } else {
      cuda_state = 1;
      (void)cudaSetDevice(current_device);
    }
  }
  if (cuda_state < 0) vsa_lua_errorf(L, "%s", cuda_why);
}

// ----------------------------------------------------------------------------
// userdata helpers

static vsa_tensor *
push_empty(lua_State *L)
{
  /* The userdata exists (with its __gc) before any storage is attached, so a
   * raise between allocation and return cannot leak device memory. */
  vsa_tensor *t = lua_newuserdata(L, sizeof *t);
  memset(t, 0, sizeof *t);
  luaL_getmetatable(L, VSA_TENSOR_MT);
  lua_setmetatable(L, -2);
  return t;
}

vsa_tensor *
vsa_lua_checktensor(lua_State *L, int idx)
{
  vsa_tensor *t = luaL_testudata(L, idx, VSA_TENSOR_MT);
  if (!t) {
    luaL_typerror(L, idx, "tensor");
    return NULL;
  }
  if (!t->st) luaL_argerror(L, idx, "tensor was freed");
  return t;
}

/* The tensor a method is called on (argument 1), errors naming the
 * method: "t:reshape: tensor was freed" (luaL_argerror cannot name a method
 * reached through __index: it says '?'). */
static vsa_tensor *
self_of(lua_State *L, const char *fn)
{
  vsa_tensor *t = luaL_testudata(L, 1, VSA_TENSOR_MT);
  if (!t)
    vsa_lua_errorf(L, "t:%s: expected a tensor as self (call it as t:%s(...)), got %s", fn, fn,
                   luaL_typename(L, 1));
  if (!t->st) vsa_lua_errorf(L, "t:%s: tensor was freed", fn);
  return t;
}

/* Argument idx of method fn as a number. */
static double
num_arg(lua_State *L, int idx, const char *fn, const char *what)
{
  if (lua_type(L, idx) != LUA_TNUMBER)
    vsa_lua_errorf(L, "%s: %s must be a number, got %s", fn, what, luaL_typename(L, idx));
  return lua_tonumber(L, idx);
}

static void
shape_string(const vsa_tensor *t, char *buf, size_t len)
{
  size_t n = snprintf(buf, len, "[");
  for (int d = 0; d < t->ndim && n < len; d++)
    n += snprintf(buf + n, len - n, d ? ",%lld" : "%lld", (long long)t->shape[d]);
  if (n < len) snprintf(buf + n, len - n, "]");
}

static void
device_string(int device, char *buf, size_t len)
{
  if (device == VSA_CPU) snprintf(buf, len, "cpu");
  else snprintf(buf, len, "cuda:%d", device);
}

vsa_tensor *
vsa_lua_pin(lua_State *L, int idx, const char *name)
{
  if (idx < 0 && idx > LUA_REGISTRYINDEX) idx = lua_gettop(L) + idx + 1;
  vsa_tensor *t = lua_touserdata(L, idx);
  vsa_tensor *p = push_empty(L); /* may run a finalizer that frees t */
  if (!t->st) vsa_lua_errorf(L, "%s: tensor was freed", name);
  vsa_tensor_share(p, t);
  lua_replace(L, idx);
  return p;
}

vsa_tensor *
vsa_lua_checkarg(lua_State *L, int idx, const char *name, int dtype, int ndim)
{
  vsa_tensor *t = luaL_testudata(L, idx, VSA_TENSOR_MT);
  if (!t) {
    vsa_lua_errorf(L, "%s: expected a tensor, got %s", name, luaL_typename(L, idx));
    return NULL;
  }
  if (!t->st) vsa_lua_errorf(L, "%s: tensor was freed", name);
  t = vsa_lua_pin(L, idx, name);
  if (dtype >= 0 && t->dtype != (vsa_dtype)dtype)
    vsa_lua_errorf(L, "%s: expected dtype %s, got %s", name,
               vsa_dtype_name((vsa_dtype)dtype), vsa_dtype_name(t->dtype));
  if (ndim >= 0 && t->ndim != ndim) {
    char s[128];
    shape_string(t, s, sizeof s);
    vsa_lua_errorf(L, "%s: expected rank %d, got shape %s", name, ndim, s);
  }
  if (!vsa_tensor_is_contiguous(t))
    vsa_lua_errorf(L, "%s: expected a contiguous tensor (call :contiguous())", name);
  return t;
}

vsa_tensor *
vsa_lua_newtensor(lua_State *L, vsa_dtype dtype, int device, int ndim,
                  const int64_t *shape)
{
  if (device != VSA_CPU) vsa_lua_require_cuda(L);
  vsa_tensor *t = push_empty(L);
  int oom = 0;
  if (vsa_tensor_alloc(t, dtype, device, ndim, shape, &oom) != 0) {
    if (!oom) vsa_lua_raise(L);
    /* Unreachable tensors (and on a GPU the cached scratch) may hold the
     * memory: reclaim, retry once. */
    if (device == VSA_CPU) lua_gc(L, LUA_GCCOLLECT, 0);
    else vsa_reclaim_device_memory(L);
    if (vsa_tensor_alloc(t, dtype, device, ndim, shape, &oom) != 0)
      vsa_lua_raise(L);
  }
  if (device == VSA_CPU && t->st) vsa_host_memory_pressure(L, t->st->bytes);
  return t;
}

// ----------------------------------------------------------------------------
// argument parsing: integers, shapes, dtypes, devices

/* Argument arg as an integer in [lo, hi]; raises naming `what` for a
 * non-number, a fraction, NaN/inf or a value out of range. */
static int64_t
check_int(lua_State *L, int arg, const char *what, int64_t lo, int64_t hi)
{
  lua_Number v = luaL_checknumber(L, arg);
  if (!(v == floor(v)) || v < (lua_Number)lo || v > (lua_Number)hi)
    vsa_lua_errorf(L, "%s: expected an integer in [%lld, %lld], got %.17g", what,
                   (long long)lo, (long long)hi, (double)v);
  return (int64_t)v;
}

/* Number of entries of the table at idx, raising unless its keys are
 * exactly 1..n (no holes, no named fields). */
static int
check_array(lua_State *L, int idx, const char *what)
{
  int n = (int)lua_objlen(L, idx), count = 0;
  lua_pushnil(L);
  while (lua_next(L, idx) != 0) {
    lua_pop(L, 1);
    count++;
  }
  if (count != n)
    vsa_lua_errorf(L, "%s: expected a list (keys 1..n, no holes), got a table with %d keys", what, count);
  return n;
}

/* Parse "cpu", "cuda", "cuda:N" (or a tensor: its device) at idx. */
static int
parse_device(lua_State *L, int idx, const char *what)
{
  if (luaL_testudata(L, idx, VSA_TENSOR_MT))
    return ((vsa_tensor *)lua_touserdata(L, idx))->device;
  const char *s = lua_tostring(L, idx);
  if (!s || lua_type(L, idx) != LUA_TSTRING)
    return vsa_lua_errorf(L, "%s: expected 'cpu', 'cuda' or 'cuda:N', got %s",
                      what, luaL_typename(L, idx));
  if (strcmp(s, "cpu") == 0) return VSA_CPU;
  if (strcmp(s, "cuda") == 0) return current_device;
  int n;
  char tail;
  if (sscanf(s, "cuda:%d%c", &n, &tail) == 1 && n >= 0) return n;
  return vsa_lua_errorf(L, "%s: expected 'cpu', 'cuda' or 'cuda:N', got '%s'",
                    what, s);
}

static vsa_dtype
parse_dtype(lua_State *L, int idx, const char *what)
{
  const char *s = lua_tostring(L, idx);
  vsa_dtype t;
  if (!s || lua_type(L, idx) != LUA_TSTRING || vsa_dtype_parse(s, &t) != 0)
    vsa_lua_errorf(L, "%s: expected 'bf16', 'f32', 'f64', 'i32' or 'i64', got %s",
               what, s ? s : luaL_typename(L, idx));
  return t;
}

/* Shape from a table of non-negative integers at idx. */
static int
parse_shape(lua_State *L, int idx, int64_t *shape)
{
  if (!lua_istable(L, idx))
    vsa_lua_errorf(L, "shape: expected a table of sizes, got %s", luaL_typename(L, idx));
  int n = check_array(L, idx, "shape");
  if (n > VSA_MAX_DIMS) vsa_lua_errorf(L, "shape: more than 8 dimensions (%d)", n);
  double total = 1;
  for (int d = 0; d < n; d++) {
    lua_rawgeti(L, idx, d + 1);
    lua_Number v = lua_tonumber(L, -1);
    if (lua_type(L, -1) != LUA_TNUMBER || v < 0 || v != floor(v))
      vsa_lua_errorf(L, "shape: entry %d must be a non-negative integer, got %s", d + 1,
                     lua_type(L, -1) == LUA_TNUMBER ? lua_pushfstring(L, "%f", v) : luaL_typename(L, -1));
    if (v > 9e15)
      vsa_lua_errorf(L, "shape: entry %d is %.17g, more than any memory holds (at most 9e15)", d + 1,
                     (double)v);
    shape[d] = (int64_t)v;
    total *= v;
    lua_pop(L, 1);
  }
  /* Element counts stay far below 2^62 so byte offsets cannot overflow. */
  if (total > 4e18) vsa_lua_errorf(L, "shape: %g elements is too large", total);
  return n;
}

/* Options table at idx: {dtype=, device=}; defaults f32 on cpu. Any other
 * key raises (a misspelt dtyp= made an f32 tensor unseen). */
static void
parse_placement(lua_State *L, int idx, const char *fn, vsa_dtype *dtype, int *device)
{
  static const char *const keys[] = {"dtype", "device", NULL};
  *dtype = VSA_F32;
  *device = VSA_CPU;
  if (lua_isnoneornil(L, idx)) return;
  luaL_checktype(L, idx, LUA_TTABLE);
  vsa_arg_check_keys(L, idx, fn, keys);
  lua_getfield(L, idx, "dtype");
  if (!lua_isnil(L, -1)) *dtype = parse_dtype(L, lua_gettop(L), "dtype");
  lua_pop(L, 1);
  lua_getfield(L, idx, "device");
  if (!lua_isnil(L, -1)) *device = parse_device(L, lua_gettop(L), "device");
  lua_pop(L, 1);
}

static int
opt_int_field(lua_State *L, int idx, const char *k, lua_Number def,
              lua_Number *out)
{
  lua_getfield(L, idx, k);
  int present = !lua_isnil(L, -1);
  if (present && lua_type(L, -1) != LUA_TNUMBER)
    vsa_lua_errorf(L, "%s: expected a number, got %s", k, luaL_typename(L, -1));
  *out = present ? lua_tonumber(L, -1) : def;
  lua_pop(L, 1);
  return present;
}

// ----------------------------------------------------------------------------
// constructors

/* An uninitialised tensor of shape (at 1) and options (at 2) for fn. */
static int
new_tensor(lua_State *L, const char *fn)
{
  int64_t shape[VSA_MAX_DIMS];
  int n = parse_shape(L, 1, shape);
  vsa_dtype dt;
  int dev;
  parse_placement(L, 2, fn, &dt, &dev);
  vsa_lua_newtensor(L, dt, dev, n, shape);
  return 1;
}

/* vsalab.empty(shape [, {dtype=, device=}]) */
static int
l_empty(lua_State *L)
{
  return new_tensor(L, "empty");
}

static int
fill_top(lua_State *L, double v)
{
  if (vsa_tensor_fill(lua_touserdata(L, -1), v) != 0) vsa_lua_raise(L);
  return 1;
}

/* vsalab.zeros(shape [, opts]) */
static int
l_zeros(lua_State *L)
{
  new_tensor(L, "zeros");
  return fill_top(L, 0.0);
}

/* vsalab.full(shape, value [, opts]) */
static int
l_full(lua_State *L)
{
  double v = luaL_checknumber(L, 2);
  lua_remove(L, 2);
  new_tensor(L, "full");
  return fill_top(L, v);
}

/* Walk nested tables at idx to find the shape (first elements). */
static int
nested_shape(lua_State *L, int idx, int64_t *shape)
{
  int n = 0;
  lua_pushvalue(L, idx);
  while (lua_type(L, -1) == LUA_TTABLE) {
    if (n == VSA_MAX_DIMS) vsa_lua_errorf(L, "from_table: more than 8 levels");
    shape[n++] = (int64_t)lua_objlen(L, -1);
    lua_rawgeti(L, -1, 1);
    lua_remove(L, -2);
  }
  lua_pop(L, 1);
  return n;
}

static void
nested_fill(lua_State *L, int idx, vsa_tensor *t, int dim, int64_t *pos,
            char *path, size_t plen)
{
  if (dim == t->ndim) {
    if (lua_type(L, idx) != LUA_TNUMBER && lua_type(L, idx) != LUA_TBOOLEAN)
      vsa_lua_errorf(L, "from_table: element %s is %s, expected a number", path,
                 luaL_typename(L, idx));
    double v = lua_type(L, idx) == LUA_TBOOLEAN ? lua_toboolean(L, idx)
                                                : lua_tonumber(L, idx);
    vsa_tensor_set(t, (*pos)++, v);
    return;
  }
  if (lua_type(L, idx) != LUA_TTABLE || (int64_t)lua_objlen(L, idx) != t->shape[dim] ||
      check_array(L, idx, "from_table") != t->shape[dim])
    vsa_lua_errorf(L, "from_table: ragged nesting at %s (expected a table of %lld)",
               path[0] ? path : "top", (long long)t->shape[dim]);
  size_t l = strlen(path);
  for (int64_t i = 1; i <= t->shape[dim]; i++) {
    snprintf(path + l, plen - l, "[%lld]", (long long)i);
    lua_rawgeti(L, idx, (int)i);
    nested_fill(L, lua_gettop(L), t, dim + 1, pos, path, plen);
    lua_pop(L, 1);
  }
  path[l] = 0;
}

/* vsalab.from_table(nested [, {dtype=, device=}]) */
static int
l_from_table(lua_State *L)
{
  luaL_checktype(L, 1, LUA_TTABLE);
  vsa_dtype dt;
  int dev;
  parse_placement(L, 2, "from_table", &dt, &dev);
  int64_t shape[VSA_MAX_DIMS];
  int n = nested_shape(L, 1, shape);
  vsa_tensor *host = vsa_lua_newtensor(L, dt, VSA_CPU, n, shape);
  int64_t pos = 0;
  char path[256] = "";
  nested_fill(L, 1, host, 0, &pos, path, sizeof path);
  if (dev == VSA_CPU) return 1;
  vsa_tensor *d = vsa_lua_newtensor(L, dt, dev, n, shape);
  if (vsa_tensor_copy(d, host) != 0) vsa_lua_raise(L);
  return 1;
}

// ----------------------------------------------------------------------------
// methods

/* A contiguous host copy of t pushed on the stack (t itself if it is one). */
static vsa_tensor *
push_host_contiguous(lua_State *L, int idx)
{
  vsa_tensor *t = vsa_lua_checktensor(L, idx);
  if (t->device == VSA_CPU && vsa_tensor_is_contiguous(t)) {
    /* A view of its own: building the Lua values may run a finalizer that
     * frees t, and the storage must outlive the reads. */
    lua_pushvalue(L, idx);
    return vsa_lua_pin(L, -1, "tensor");
  }
  vsa_tensor *h = vsa_lua_newtensor(L, t->dtype, VSA_CPU, t->ndim, t->shape);
  if (vsa_tensor_copy(h, t) != 0) vsa_lua_raise(L);
  return h;
}

static void
push_nested(lua_State *L, const vsa_tensor *t, int dim, int64_t *pos)
{
  if (dim == t->ndim) {
    if (t->dtype == VSA_I32 || t->dtype == VSA_I64)
      lua_pushinteger(L, (lua_Integer)vsa_tensor_get(t, (*pos)++));
    else
      lua_pushnumber(L, vsa_tensor_get(t, (*pos)++));
    return;
  }
  lua_createtable(L, (int)t->shape[dim], 0);
  for (int64_t i = 0; i < t->shape[dim]; i++) {
    push_nested(L, t, dim + 1, pos);
    lua_rawseti(L, -2, (int)(i + 1));
  }
}

/* t:to_table() -> nested tables (a scalar for rank 0); small tensors only. */
static int
l_to_table(lua_State *L)
{
  vsa_tensor *t = self_of(L, "to_table");
  /* Count the Lua values to build: elements plus nested tables. */
  double cells = 1, tables = 0;
  for (int d = 0; d < t->ndim; d++) {
    tables += cells;
    cells *= (double)t->shape[d];
  }
  if (cells + tables > (double)(1 << 24))
    return vsa_lua_errorf(L, "to_table: more than 16M values; narrow the tensor first");
  vsa_tensor *h = push_host_contiguous(L, 1);
  int64_t pos = 0;
  push_nested(L, h, 0, &pos);
  return 1;
}

/* t:to(device) -> a copy on device (t itself when already there). */
static int
l_to(lua_State *L)
{
  vsa_tensor *t = self_of(L, "to");
  int dev = parse_device(L, 2, "device");
  if (dev == t->device) {
    lua_pushvalue(L, 1);
    return 1;
  }
  vsa_tensor *d = vsa_lua_newtensor(L, t->dtype, dev, t->ndim, t->shape);
  if (vsa_tensor_copy(d, t) != 0) vsa_lua_raise(L);
  return 1;
}

/* t:to_dtype(dtype) -> a converted contiguous copy (t itself if same). */
static int
l_to_dtype(lua_State *L)
{
  vsa_tensor *t = self_of(L, "to_dtype");
  vsa_dtype dt = parse_dtype(L, 2, "dtype");
  if (dt == t->dtype) {
    lua_pushvalue(L, 1);
    return 1;
  }
  vsa_tensor *d = vsa_lua_newtensor(L, dt, t->device, t->ndim, t->shape);
  if (vsa_tensor_convert(d, t) != 0) vsa_lua_raise(L);
  return 1;
}

/* t:clone() -> a contiguous copy on the same device. */
static int
l_clone(lua_State *L)
{
  vsa_tensor *t = self_of(L, "clone");
  vsa_tensor *d = vsa_lua_newtensor(L, t->dtype, t->device, t->ndim, t->shape);
  if (vsa_tensor_copy(d, t) != 0) vsa_lua_raise(L);
  return 1;
}

/* t:contiguous() -> t if contiguous, else a contiguous copy. */
static int
l_contiguous(lua_State *L)
{
  vsa_tensor *t = self_of(L, "contiguous");
  if (vsa_tensor_is_contiguous(t)) {
    lua_pushvalue(L, 1);
    return 1;
  }
  return l_clone(L);
}

/* t:copy_(src) -> t, after copying src (same shape and dtype) into it. */
static int
l_copy_(lua_State *L)
{
  vsa_tensor *t = self_of(L, "copy_");
  vsa_tensor *s = vsa_lua_checktensor(L, 2);
  for (int d = 0; d < t->ndim; d++)
    if (t->stride[d] == 0 && t->shape[d] > 1)
      return vsa_lua_errorf(L, "copy_: the destination broadcasts dim %d (stride 0); copy into a real tensor", d + 1);
  if (t->st == s->st) {
    /* Overlapping views of one storage: go through a private copy. */
    s = vsa_lua_newtensor(L, s->dtype, s->device, s->ndim, s->shape);
    if (vsa_tensor_copy(s, vsa_lua_checktensor(L, 2)) != 0) vsa_lua_raise(L);
  }
  if (vsa_tensor_copy(t, s) != 0) vsa_lua_raise(L);
  lua_settop(L, 1);
  return 1;
}

/* t:fill(value) -> t */
static int
l_fill(lua_State *L)
{
  vsa_tensor *t = self_of(L, "fill");
  if (vsa_tensor_fill(t, num_arg(L, 2, "t:fill", "value")) != 0) vsa_lua_raise(L);
  lua_settop(L, 1);
  return 1;
}

/* t:fill_randn{seed=, mean=0, std=1, offset=0} -> t (cuRAND Philox). */
static int
l_fill_randn(lua_State *L)
{
  vsa_tensor *t = self_of(L, "fill_randn");
  if (!lua_istable(L, 2))
    return vsa_lua_errorf(L, "t:fill_randn: expected an options table {seed=, mean=, std=, offset=}, got %s",
                          luaL_typename(L, 2));
  static const char *const keys[] = {"seed", "mean", "std", "offset", NULL};
  vsa_arg_check_keys(L, 2, "fill_randn", keys);
  lua_Number seed, mean, std, offset;
  if (!opt_int_field(L, 2, "seed", 0, &seed))
    return vsa_lua_errorf(L, "t:fill_randn: field 'seed' is required");
  opt_int_field(L, 2, "mean", 0, &mean);
  opt_int_field(L, 2, "std", 1, &std);
  opt_int_field(L, 2, "offset", 0, &offset);
  /* Integers a double holds exactly: larger ones would silently collide. */
  if (!(seed >= 0 && seed == floor(seed) && seed < 9007199254740992.0))
    return vsa_lua_errorf(L, "fill_randn: field 'seed' must be an integer in [0, 2^53)");
  if (!(offset >= 0 && offset == floor(offset) && offset < 9007199254740992.0))
    return vsa_lua_errorf(L, "fill_randn: field 'offset' must be an integer in [0, 2^53)");
  if (!(std >= 0 && std < HUGE_VAL))
    return vsa_lua_errorf(L, "fill_randn: field 'std' must be a finite number >= 0");
  if (!(mean > -HUGE_VAL && mean < HUGE_VAL))
    return vsa_lua_errorf(L, "fill_randn: field 'mean' must be a finite number");
  /* Samples are f32 (then converted): |z| <= 6.7 for Philox's Box-Muller, so
   * |mean| + 8 std within bf16's largest finite value keeps every sample
   * finite in every dtype. */
  if (!(fabs(mean) + 8 * std <= 3.38e38))
    return vsa_lua_errorf(L, "fill_randn: mean %g and std %g would give infinite samples "
                          "(need |mean| + 8*std <= 3.38e38, the bf16/f32 range)", mean, std);
  int rc = vsa_tensor_randn(t, (uint64_t)seed, (uint64_t)offset, mean, std);
  if (rc != 0 && vsa_last_error_is_oom()) {
    vsa_reclaim_device_memory(L); /* its f32 staging buffer did not fit */
    rc = vsa_tensor_randn(t, (uint64_t)seed, (uint64_t)offset, mean, std);
  }
  if (rc != 0) vsa_lua_raise(L);
  lua_settop(L, 1);
  return 1;
}

static int
l_numel(lua_State *L)
{
  lua_pushnumber(L, (lua_Number)vsa_tensor_numel(self_of(L, "numel")));
  return 1;
}

static int
l_is_contiguous(lua_State *L)
{
  lua_pushboolean(L, vsa_tensor_is_contiguous(self_of(L, "is_contiguous")));
  return 1;
}

static int
check_dim(lua_State *L, const vsa_tensor *t, int arg)
{
  return (int)check_int(L, arg, "dim", 1, t->ndim > 0 ? t->ndim : 1) - 1;
}

/* t:narrow(dim, start, len) -> view; dim and start are 1-based. */
static int
l_narrow(lua_State *L)
{
  vsa_tensor *t = self_of(L, "narrow");
  int d = check_dim(L, t, 2);
  int64_t size = t->shape[d];
  int64_t start = check_int(L, 3, "narrow: start", 1, size + 1) - 1;
  int64_t len = check_int(L, 4, "narrow: len", 0, size - start);
  vsa_tensor *o = push_empty(L);
  if (vsa_tensor_narrow(o, t, d, start, len) != 0) vsa_lua_raise(L);
  return 1;
}

/* t:select(dim, index) -> view without dim; both 1-based. */
static int
l_select(lua_State *L)
{
  vsa_tensor *t = self_of(L, "select");
  int d = check_dim(L, t, 2);
  int64_t i = check_int(L, 3, "select: index", 1, t->shape[d]) - 1;
  vsa_tensor *o = push_empty(L);
  if (vsa_tensor_select(o, t, d, i) != 0) vsa_lua_raise(L);
  return 1;
}

/* t:transpose(d1, d2) -> view with two dimensions swapped (1-based). */
static int
l_transpose(lua_State *L)
{
  vsa_tensor *t = self_of(L, "transpose");
  int a = check_dim(L, t, 2), b = check_dim(L, t, 3);
  vsa_tensor *o = push_empty(L);
  vsa_tensor_share(o, t);
  o->shape[a] = t->shape[b];
  o->shape[b] = t->shape[a];
  o->stride[a] = t->stride[b];
  o->stride[b] = t->stride[a];
  return 1;
}

/* t:expand(shape) -> view broadcasting size-1 dimensions (stride 0), of
 * at most 2^36 elements (the most a bf16 tensor on a 141 GB GPU holds): a
 * larger view would only make every op on it run for hours. */
static int
l_expand(lua_State *L)
{
  vsa_tensor *t = self_of(L, "expand");
  int64_t shape[VSA_MAX_DIMS];
  int n = parse_shape(L, 2, shape);
  if (n != t->ndim) vsa_lua_errorf(L, "t:expand: the shape must keep the rank %d, got %d entries", t->ndim, n);
  double numel = 1;
  for (int d = 0; d < n; d++) {
    if (!(shape[d] == t->shape[d] || t->shape[d] == 1))
      vsa_lua_errorf(L, "t:expand: only size-1 dimensions can be expanded (dim %d is %lld, asked %lld)",
                     d + 1, (long long)t->shape[d], (long long)shape[d]);
    numel *= (double)shape[d];
  }
  if (!(numel <= 68719476736.0))
    vsa_lua_errorf(L, "t:expand: the view would have more than 2^36 elements");
  vsa_tensor *o = push_empty(L);
  vsa_tensor_share(o, t);
  for (int d = 0; d < n; d++)
    if (shape[d] != t->shape[d]) {
      o->shape[d] = shape[d];
      o->stride[d] = 0;
    }
  return 1;
}

/* t:reshape(shape) -> view of a contiguous tensor with another shape of the
 * same element count (the bytes are reinterpreted, not moved). */
static int
l_reshape(lua_State *L)
{
  vsa_tensor *t = self_of(L, "reshape");
  int64_t shape[VSA_MAX_DIMS];
  int n = parse_shape(L, 2, shape);
  int64_t cnt = 1;
  for (int d = 0; d < n; d++) cnt *= shape[d];
  if (cnt != vsa_tensor_numel(t))
    vsa_lua_errorf(L, "t:reshape: %lld elements cannot take a shape of %lld", (long long)vsa_tensor_numel(t),
                   (long long)cnt);
  if (!vsa_tensor_is_contiguous(t))
    vsa_lua_errorf(L, "t:reshape: needs a contiguous tensor (call :contiguous() first)");
  vsa_tensor *o = push_empty(L);
  vsa_tensor_share(o, t);
  o->ndim = n;
  int64_t s = 1;
  for (int d = n - 1; d >= 0; d--) {
    o->shape[d] = shape[d];
    o->stride[d] = s;
    s *= shape[d];
  }
  return 1;
}

/* Element offset of t[i1, i2, ...] (1-based) from arguments 2.. */
static int64_t
element_offset(lua_State *L, const vsa_tensor *t)
{
  int64_t off = 0;
  for (int d = 0; d < t->ndim; d++) {
    char what[48];
    snprintf(what, sizeof what, "index %d", d + 1);
    int64_t i = check_int(L, d + 2, what, 1, t->shape[d]) - 1;
    off += i * t->stride[d];
  }
  return off;
}

/* t:get(i1, ..., iN) -> number (any device; one element copied back). */
static int
l_get(lua_State *L)
{
  vsa_tensor *t = self_of(L, "get");
  if (lua_gettop(L) != t->ndim + 1)
    return vsa_lua_errorf(L, "get: expected %d indices, got %d", t->ndim, lua_gettop(L) - 1);
  int64_t off = element_offset(L, t);
  vsa_tensor one;
  int64_t sh[1] = {1};
  if (vsa_tensor_alloc(&one, t->dtype, VSA_CPU, 1, sh, NULL) != 0) vsa_lua_raise(L);
  size_t es = vsa_dtype_size(t->dtype);
  cudaError_t e = cudaSuccess;
  if (t->device == VSA_CPU)
    memcpy(vsa_tensor_data(&one), (char *)vsa_tensor_data(t) + off * es, es);
  else
    e = cudaMemcpy(vsa_tensor_data(&one), (char *)vsa_tensor_data(t) + off * es,
                   es, cudaMemcpyDeviceToHost);
  double v = vsa_tensor_get(&one, 0);
  vsa_tensor_release(&one);
  if (e != cudaSuccess) {
    vsa_fail_cuda(e, "get", __FILE__, __LINE__);
    vsa_lua_raise(L);
  }
  lua_pushnumber(L, v);
  return 1;
}

/* t:set(i1, ..., iN, value) -> t */
static int
l_set(lua_State *L)
{
  vsa_tensor *t = self_of(L, "set");
  if (lua_gettop(L) != t->ndim + 2)
    return vsa_lua_errorf(L, "set: expected %d indices and a value", t->ndim);
  double v = num_arg(L, t->ndim + 2, "t:set", "value");
  int64_t off = element_offset(L, t);
  vsa_tensor one;
  if (vsa_tensor_alloc(&one, t->dtype, VSA_CPU, 0, NULL, NULL) != 0) vsa_lua_raise(L);
  vsa_tensor_set(&one, 0, v);
  size_t es = vsa_dtype_size(t->dtype);
  cudaError_t e = cudaSuccess;
  if (t->device == VSA_CPU)
    memcpy((char *)vsa_tensor_data(t) + off * es, vsa_tensor_data(&one), es);
  else
    e = cudaMemcpy((char *)vsa_tensor_data(t) + off * es, vsa_tensor_data(&one),
                   es, cudaMemcpyHostToDevice);
  vsa_tensor_release(&one);
  if (e != cudaSuccess) {
    vsa_fail_cuda(e, "set", __FILE__, __LINE__);
    vsa_lua_raise(L);
  }
  lua_settop(L, 1);
  return 1;
}

/* t:free(): release the storage now (later uses raise "tensor was freed"). */
static int
l_free(lua_State *L)
{
  vsa_tensor *t = luaL_checkudata(L, 1, VSA_TENSOR_MT);
  vsa_tensor_release(t);
  return 0;
}

static int
l_gc(lua_State *L)
{
  vsa_tensor_release(luaL_checkudata(L, 1, VSA_TENSOR_MT));
  return 0;
}

/* "Tensor[2,3] f32 cpu {0.1, 0.2, ... } nan=0" */
static int
l_tostring(lua_State *L)
{
  vsa_tensor *t = luaL_checkudata(L, 1, VSA_TENSOR_MT);
  char shape[160], dev[32];
  if (!t->st) {
    lua_pushstring(L, "Tensor(freed)");
    return 1;
  }
  shape_string(t, shape, sizeof shape);
  device_string(t->device, dev, sizeof dev);
  luaL_Buffer b;
  luaL_buffinit(L, &b);
  lua_pushfstring(L, "Tensor%s %s %s", shape, vsa_dtype_name(t->dtype), dev);
  luaL_addvalue(&b);
  int64_t n = vsa_tensor_numel(t);
  /* A preview of the first elements (copied back when on a device). */
  if (n > 0 && n <= (1 << 26)) {
    vsa_tensor *h = push_host_contiguous(L, 1);
    int show = n < 6 ? (int)n : 6;
    int64_t nonfinite = 0;
    for (int64_t i = 0; i < n; i++)
      if (!isfinite(vsa_tensor_get(h, i))) nonfinite++;
    lua_pop(L, 1);
    luaL_addstring(&b, " {");
    for (int i = 0; i < show; i++) {
      char num[32];
      if (t->dtype == VSA_I32 || t->dtype == VSA_I64)
        snprintf(num, sizeof num, i ? ", %.0f" : "%.0f", vsa_tensor_get(h, i));
      else
        snprintf(num, sizeof num, i ? ", %.5g" : "%.5g", vsa_tensor_get(h, i));
      luaL_addstring(&b, num);
    }
    luaL_addstring(&b, n > show ? ", ...}" : "}");
    if (t->dtype != VSA_I32 && t->dtype != VSA_I64) {
      lua_pushfstring(L, " nonfinite=%d", (int)nonfinite);
      luaL_addvalue(&b);
    }
  }
  luaL_pushresult(&b);
  return 1;
}

/* Properties: t.dtype, t.device, t.ndim, t.shape (a fresh table). */
static int
l_index(lua_State *L)
{
  vsa_tensor *t = luaL_checkudata(L, 1, VSA_TENSOR_MT);
  const char *k = lua_tostring(L, 2);
  luaL_getmetatable(L, VSA_TENSOR_MT);
  lua_getfield(L, -1, "methods");
  lua_pushvalue(L, 2);
  lua_rawget(L, -2);
  if (!lua_isnil(L, -1)) return 1;
  if (!k) return 0;
  if (!t->st && strcmp(k, "freed") != 0)
    return vsa_lua_errorf(L, "tensor was freed");
  if (strcmp(k, "dtype") == 0) {
    lua_pushstring(L, vsa_dtype_name(t->dtype));
  } else if (strcmp(k, "device") == 0) {
    char dev[32];
    device_string(t->device, dev, sizeof dev);
    lua_pushstring(L, dev);
  } else if (strcmp(k, "ndim") == 0) {
    lua_pushinteger(L, t->ndim);
  } else if (strcmp(k, "shape") == 0) {
    lua_createtable(L, t->ndim, 0);
    for (int d = 0; d < t->ndim; d++) {
      lua_pushnumber(L, (lua_Number)t->shape[d]);
      lua_rawseti(L, -2, d + 1);
    }
  } else if (strcmp(k, "freed") == 0) {
    lua_pushboolean(L, t->st == NULL);
  } else {
    return 0;
  }
  return 1;
}

/* vsalab.is_tensor(x) */
static int
l_is_tensor(lua_State *L)
{
  lua_pushboolean(L, luaL_testudata(L, 1, VSA_TENSOR_MT) != NULL);
  return 1;
}

/* vsalab.set_device(n): where later CUDA tensors are allocated. */
static int
l_set_device(lua_State *L)
{
  int d = (int)check_int(L, 1, "set_device: device", 0, 1023);
  current_device = d;
  cuda_state = 0;
  vsa_lua_require_cuda(L);
  return 0;
}

/* vsalab.cuda_available() -> boolean, reason */
static int
l_cuda_available(lua_State *L)
{
  int n;
  if (vsa_device_count(&n) != 0) {
    lua_pushboolean(L, 0);
    lua_pushstring(L, vsa_last_error());
    return 2;
  }
  lua_pushboolean(L, 1);
  lua_pushinteger(L, n);
  return 2;
}

/* vsalab.isatty(fd) -> whether stdout (1) or stderr (2) is a terminal */
static int
l_isatty(lua_State *L)
{
  lua_pushboolean(L, isatty((int)check_int(L, 1, "isatty: fd", 0, 1 << 20)));
  return 1;
}

/* vsalab.host_bytes() -> bytes of host memory held by live tensors */
static int
l_host_bytes(lua_State *L)
{
  lua_pushnumber(L, (lua_Number)vsa_host_bytes_in_use());
  return 1;
}

/* vsalab.device_bytes() -> bytes of device memory held by live tensors */
static int
l_device_bytes(lua_State *L)
{
  lua_pushnumber(L, (lua_Number)vsa_device_bytes_in_use());
  return 1;
}

static const luaL_Reg tensor_methods[] = {
    {"to_table", l_to_table}, {"to", l_to},
    {"to_dtype", l_to_dtype}, {"clone", l_clone},
    {"contiguous", l_contiguous}, {"copy_", l_copy_},
    {"fill", l_fill}, {"fill_randn", l_fill_randn},
    {"numel", l_numel}, {"is_contiguous", l_is_contiguous},
    {"narrow", l_narrow}, {"select", l_select},
    {"transpose", l_transpose}, {"expand", l_expand},
    {"reshape", l_reshape},
    {"get", l_get}, {"set", l_set},
    {"free", l_free}, {NULL, NULL}};

static const luaL_Reg tensor_functions[] = {
    {"empty", l_empty}, {"zeros", l_zeros},
    {"full", l_full}, {"from_table", l_from_table},
    {"is_tensor", l_is_tensor}, {"set_device", l_set_device},
    {"cuda_available", l_cuda_available}, {"device_bytes", l_device_bytes}, {"host_bytes", l_host_bytes},
    {"isatty", l_isatty},
    {NULL, NULL}};

void
vsa_lua_open_tensor(lua_State *L)
{
  luaL_newmetatable(L, VSA_TENSOR_MT);
  lua_pushcfunction(L, l_gc);
  lua_setfield(L, -2, "__gc");
  lua_pushcfunction(L, l_tostring);
  lua_setfield(L, -2, "__tostring");
  lua_pushcfunction(L, l_index);
  lua_setfield(L, -2, "__index");
  lua_newtable(L);
  luaL_register(L, NULL, tensor_methods);
  lua_setfield(L, -2, "methods");
  /* The property names l_index answers (for the REPL's Tab completion). */
  static const char *const props[] = {"shape", "dtype", "device", "ndim", "freed"};
  lua_createtable(L, 5, 0);
  for (int i = 0; i < 5; i++) {
    lua_pushstring(L, props[i]);
    lua_rawseti(L, -2, i + 1);
  }
  lua_setfield(L, -2, "properties");
  lua_pop(L, 1);
  luaL_register(L, NULL, tensor_functions);
}
