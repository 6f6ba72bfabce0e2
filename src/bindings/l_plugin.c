/* l_plugin.c — plug-in backwards: dlopen a shared library built against
 * include/vsalab_plugin.h and call its backward on vsalab tensors (class
 * "vsa.Plugin"). The Lua side (lua/vsalab/plugin.lua) canonicalises the
 * lists, allocates and poisons the outputs and registers the backend.
 *
 *   vsalab.plugin_open(path, symbol [, name]) -> plugin (raises: missing file,
 *     missing symbol, no vsalab_plugin_abi, an ABI version other than 1 or 2)
 *   plugin:info() -> {abi_version=, cpu=, cuda=, capturable=, blocks={64,...},
 *     layouts={'bhsd',...}, path=, symbol=} (version 1: {64}, {'bhsd'})
 *   plugin:backward(dO, q, k, v, o, lse, q2k_idx, q2k_num, k2q_idx, k2q_num,
 *     vbs, dq, dk, dv, sm_scale [, user_data [, layout='bhsd']]) -> nothing;
 *     the block size is Skv / #vbs; a block size or layout the library did
 *     not declare raises; a plug-in error raises "backend <name> failed:
 *     <message> (code N)".
 * Libraries are never dlclosed: a plug-in may have registered CUDA kernels
 * or atexit handlers that must outlive the Lua object.
 */
#include <dlfcn.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "bsa.h"
#include "device.h"
#include "l_args.h"
#include "l_tensor.h"
#include "lua_api.h"
#include "vsalab_plugin.h"

#define VSA_PLUGIN_MT "vsa.Plugin"

typedef struct {
  vsalab_plugin_backward_fn fn;
  vsalab_plugin_info info;
  char path[1024];
  char symbol[256];
  char name[128]; /* the backend's name, in error messages */
} vsa_plugin;

/* vsalab.plugin_open(path, symbol) */
static int
l_plugin_open(lua_State *L)
{
  const char *path = luaL_checkstring(L, 1);
  const char *symbol = luaL_checkstring(L, 2);
  const char *name = luaL_optstring(L, 3, symbol);
  struct stat sb;
  if (stat(path, &sb) != 0)
    return vsa_lua_errorf(L, "plugin: no file '%s'", path);
  /* A path without '/' would make dlopen search the library path instead. */
  char full[1100];
  snprintf(full, sizeof full, "%s%s", strchr(path, '/') ? "" : "./", path);
  void *h = dlopen(full, RTLD_NOW | RTLD_LOCAL);
  if (!h) return vsa_lua_errorf(L, "plugin: cannot load '%s': %s", path, dlerror());
  typedef const vsalab_plugin_info *(*abi_fn)(void);
  abi_fn abi = (abi_fn)dlsym(h, VSALAB_PLUGIN_ABI_SYMBOL);
  if (!abi)
    return vsa_lua_errorf(L, "plugin: '%s' does not export %s(): build it against "
                             "include/vsalab_plugin.h with VSALAB_PLUGIN_DEFINE(devices, flags)",
                          path, VSALAB_PLUGIN_ABI_SYMBOL);
  const vsalab_plugin_info *info = abi();
  if (!info) return vsa_lua_errorf(L, "plugin: %s() of '%s' returned NULL", VSALAB_PLUGIN_ABI_SYMBOL, path);
  if (info->abi_version != 1 && info->abi_version != VSALAB_PLUGIN_ABI_VERSION)
    return vsa_lua_errorf(L, "plugin: '%s' was built for plug-in ABI version %u, this vsalab "
                             "speaks versions 1 and %d: rebuild it against this include/vsalab_plugin.h",
                          path, info->abi_version, VSALAB_PLUGIN_ABI_VERSION);
  /* Version 1's info ends at flags: block 64 and BHSD, what it promised. */
  vsalab_plugin_info got = {info->abi_version, info->devices, info->flags,
                            VSALAB_PLUGIN_BLOCK_64, VSALAB_PLUGIN_LAYOUT_BHSD};
  if (info->abi_version >= 2) {
    got.blocks = info->blocks;
    got.layouts = info->layouts;
    if (!(got.blocks & (VSALAB_PLUGIN_BLOCK_64 | VSALAB_PLUGIN_BLOCK_128)))
      return vsa_lua_errorf(L, "plugin: '%s' declares no block size (VSALAB_PLUGIN_BLOCK_64, "
                               "VSALAB_PLUGIN_BLOCK_128)", path);
    if (!(got.layouts & (VSALAB_PLUGIN_LAYOUT_BHSD | VSALAB_PLUGIN_LAYOUT_BSHD)))
      return vsa_lua_errorf(L, "plugin: '%s' declares no layout (VSALAB_PLUGIN_LAYOUT_BHSD, "
                               "VSALAB_PLUGIN_LAYOUT_BSHD)", path);
  }
  if (!(info->devices & (VSALAB_PLUGIN_CPU | VSALAB_PLUGIN_CUDA)))
    return vsa_lua_errorf(L, "plugin: '%s' declares no device (VSALAB_PLUGIN_CPU, VSALAB_PLUGIN_CUDA)", path);
  dlerror();
  void *f = dlsym(h, symbol);
  if (!f)
    return vsa_lua_errorf(L, "plugin: '%s' has no symbol '%s' (exported with C linkage "
                             "and default visibility?)", path, symbol);
  vsa_plugin *p = lua_newuserdata(L, sizeof *p);
  memset(p, 0, sizeof *p);
  p->fn = (vsalab_plugin_backward_fn)f;
  p->info = got;
  snprintf(p->path, sizeof p->path, "%s", path);
  snprintf(p->symbol, sizeof p->symbol, "%s", symbol);
  snprintf(p->name, sizeof p->name, "%s", name);
  luaL_getmetatable(L, VSA_PLUGIN_MT);
  lua_setmetatable(L, -2);
  return 1;
}

static vsa_plugin *
check_plugin(lua_State *L)
{
  return luaL_checkudata(L, 1, VSA_PLUGIN_MT);
}

static int
l_plugin_info(lua_State *L)
{
  vsa_plugin *p = check_plugin(L);
  lua_createtable(L, 0, 6);
  lua_pushinteger(L, p->info.abi_version);
  lua_setfield(L, -2, "abi_version");
  lua_pushboolean(L, (p->info.devices & VSALAB_PLUGIN_CPU) != 0);
  lua_setfield(L, -2, "cpu");
  lua_pushboolean(L, (p->info.devices & VSALAB_PLUGIN_CUDA) != 0);
  lua_setfield(L, -2, "cuda");
  lua_pushboolean(L, (p->info.flags & VSALAB_PLUGIN_CAPTURABLE) != 0);
  lua_setfield(L, -2, "capturable");
  lua_newtable(L);
  int n = 0;
  if (p->info.blocks & VSALAB_PLUGIN_BLOCK_64) lua_pushinteger(L, 64), lua_rawseti(L, -2, ++n);
  if (p->info.blocks & VSALAB_PLUGIN_BLOCK_128) lua_pushinteger(L, 128), lua_rawseti(L, -2, ++n);
  lua_setfield(L, -2, "blocks");
  lua_newtable(L);
  n = 0;
  if (p->info.layouts & VSALAB_PLUGIN_LAYOUT_BHSD) lua_pushstring(L, "bhsd"), lua_rawseti(L, -2, ++n);
  if (p->info.layouts & VSALAB_PLUGIN_LAYOUT_BSHD) lua_pushstring(L, "bshd"), lua_rawseti(L, -2, ++n);
  lua_setfield(L, -2, "layouts");
  lua_pushstring(L, p->path);
  lua_setfield(L, -2, "path");
  lua_pushstring(L, p->symbol);
  lua_setfield(L, -2, "symbol");
  return 1;
}

static int
l_plugin_tostring(lua_State *L)
{
  vsa_plugin *p = check_plugin(L);
  lua_pushfstring(L, "Plugin %s:%s", p->path, p->symbol);
  return 1;
}

/* The tensor at idx as the ABI sees it, after checking dtype, rank, shape
 * (want; -1 entries are free), contiguity and device. */
static vsalab_plugin_tensor
abi_tensor(lua_State *L, int idx, const char *name, vsa_dtype dt, int ndim,
           const int64_t *want, int dev)
{
  vsa_tensor *t = vsa_lua_checkarg(L, idx, name, dt, ndim);
  int64_t w[4];
  for (int d = 0; d < ndim; d++) w[d] = want[d] < 0 ? t->shape[d] : want[d];
  vsa_arg_shape(L, t, name, ndim, w);
  vsa_arg_device(L, t, name, dev, "q");
  vsalab_plugin_tensor a;
  memset(&a, 0, sizeof a);
  a.data = vsa_tensor_data(t);
  a.dtype = dt == VSA_BF16 ? VSALAB_PLUGIN_BF16 : dt == VSA_F32 ? VSALAB_PLUGIN_F32
          : dt == VSA_F64 ? VSALAB_PLUGIN_F64 : dt == VSA_I32 ? VSALAB_PLUGIN_I32
          : VSALAB_PLUGIN_I64;
  a.ndim = ndim;
  for (int d = 0; d < 4; d++) {
    a.shape[d] = d < ndim ? t->shape[d] : 1;
    a.stride[d] = d < ndim ? t->stride[d] : 1;
  }
  return a;
}

/* plugin:backward(dO, q, k, v, o, lse, q2k_idx, q2k_num, k2q_idx, k2q_num,
 *   vbs, dq, dk, dv, sm_scale [, user_data [, layout]]) at stack 2..18. */
static int
l_plugin_backward(lua_State *L)
{
  vsa_plugin *p = check_plugin(L);
  int layout = VSA_BHSD;
  if (!lua_isnoneornil(L, 18)) {
    layout = vsa_layout_parse(luaL_checkstring(L, 18));
    if (layout < 0)
      return vsa_lua_errorf(L, "layout: '%s' is not supported (supported: bhsd, bshd)",
                            lua_tostring(L, 18));
  }
  if (!(p->info.layouts & (layout == VSA_BSHD ? VSALAB_PLUGIN_LAYOUT_BSHD : VSALAB_PLUGIN_LAYOUT_BHSD)))
    return vsa_lua_errorf(L, "plugin %s: does not take layout %s (it declares %s%s)", p->symbol,
                          vsa_layout_name(layout),
                          p->info.layouts & VSALAB_PLUGIN_LAYOUT_BHSD ? "bhsd " : "",
                          p->info.layouts & VSALAB_PLUGIN_LAYOUT_BSHD ? "bshd" : "");
  const int sd = vsa_arg_seq_dim(layout);
  vsa_tensor *q = vsa_lua_checkarg(L, 3, "q", VSA_BF16, 4);
  vsa_tensor *k = vsa_lua_checkarg(L, 4, "k", VSA_BF16, 4);
  vsa_tensor *vbs = vsa_lua_checkarg(L, 12, "variable_block_sizes", VSA_I32, 1);
  int dev = q->device;
  int64_t B = q->shape[0], H = q->shape[3 - sd], Sq = q->shape[sd], D = q->shape[3];
  int64_t Skv = k->shape[sd];
  /* The block size, as every backward takes it: Skv / #vbs. */
  int64_t block = vbs->shape[0] > 0 && Skv % vbs->shape[0] == 0 ? Skv / vbs->shape[0] : 0;
  if (block != 64 && block != 128)
    return vsa_lua_errorf(L, "plugin %s: variable_block_sizes has %lld entries for Skv %lld: "
                             "expected Skv/64 or Skv/128", p->symbol,
                          (long long)vbs->shape[0], (long long)Skv);
  if (!(p->info.blocks & (block == 128 ? VSALAB_PLUGIN_BLOCK_128 : VSALAB_PLUGIN_BLOCK_64)))
    return vsa_lua_errorf(L, "plugin %s: does not take block size %lld (it declares %s%s)",
                          p->symbol, (long long)block,
                          p->info.blocks & VSALAB_PLUGIN_BLOCK_64 ? "64 " : "",
                          p->info.blocks & VSALAB_PLUGIN_BLOCK_128 ? "128" : "");
  if (Sq % block || Skv % block || Sq == 0 || Skv == 0)
    return vsa_lua_errorf(L, "plugin %s: sequence lengths %lld, %lld must be positive multiples of %lld",
                          p->symbol, (long long)Sq, (long long)Skv, (long long)block);
  if ((dev == VSA_CPU && !(p->info.devices & VSALAB_PLUGIN_CPU)) ||
      (dev != VSA_CPU && !(p->info.devices & VSALAB_PLUGIN_CUDA)))
    return vsa_lua_errorf(L, "plugin %s: does not take %s tensors (it declares %s%s)", p->symbol,
                          dev == VSA_CPU ? "cpu" : "cuda",
                          p->info.devices & VSALAB_PLUGIN_CPU ? "cpu " : "",
                          p->info.devices & VSALAB_PLUGIN_CUDA ? "cuda" : "");
  int64_t nq = Sq / block, nkv = Skv / block;
  int64_t sq[4], sk[4], sl[3] = {B, H, Sq};
  vsa_arg_layout_shape(layout, B, H, Sq, D, sq);
  vsa_arg_layout_shape(layout, B, H, Skv, D, sk);
  int64_t sqi[4] = {B, H, nq, nkv}, sqn[3] = {B, H, nq};
  int64_t ski[4] = {B, H, nkv, nq}, skn[3] = {B, H, nkv}, sv[1] = {nkv};
  vsalab_plugin_args a;
  memset(&a, 0, sizeof a);
  /* A version-1 library sees the version-1 struct it was built for (it may
   * check abi_version for equality); block and layout are then 64, BHSD. */
  a.abi_version = p->info.abi_version;
  a.struct_size = p->info.abi_version >= 2 ? sizeof a : offsetof(vsalab_plugin_args, block);
  a.device = dev;
  a.B = (int32_t)B, a.H = (int32_t)H, a.Sq = (int32_t)Sq, a.Skv = (int32_t)Skv;
  a.D = (int32_t)D, a.nq = (int32_t)nq, a.nkv = (int32_t)nkv;
  a.block = (int32_t)block;
  a.layout = layout == VSA_BSHD ? VSALAB_PLUGIN_BSHD : VSALAB_PLUGIN_BHSD;
  a.dO = abi_tensor(L, 2, "dO", VSA_BF16, 4, sq, dev);
  a.q = abi_tensor(L, 3, "q", VSA_BF16, 4, sq, dev);
  a.k = abi_tensor(L, 4, "k", VSA_BF16, 4, sk, dev);
  a.v = abi_tensor(L, 5, "v", VSA_BF16, 4, sk, dev);
  a.o = abi_tensor(L, 6, "o", VSA_BF16, 4, sq, dev);
  a.lse = abi_tensor(L, 7, "lse", VSA_F32, 3, sl, dev);
  a.q2k_idx = abi_tensor(L, 8, "q2k_idx", VSA_I32, 4, sqi, dev);
  a.q2k_num = abi_tensor(L, 9, "q2k_num", VSA_I32, 3, sqn, dev);
  a.k2q_idx = abi_tensor(L, 10, "k2q_idx", VSA_I32, 4, ski, dev);
  a.k2q_num = abi_tensor(L, 11, "k2q_num", VSA_I32, 3, skn, dev);
  a.variable_block_sizes = abi_tensor(L, 12, "variable_block_sizes", VSA_I32, 1, sv, dev);
  a.dq = abi_tensor(L, 13, "dq", VSA_BF16, 4, sq, dev);
  a.dk = abi_tensor(L, 14, "dk", VSA_BF16, 4, sk, dev);
  a.dv = abi_tensor(L, 15, "dv", VSA_BF16, 4, sk, dev);
  /* The outputs must not alias each other or an input. */
  for (int x = 13; x <= 15; x++)
    for (int y = 2; y < x; y++)
      if (((vsa_tensor *)lua_touserdata(L, x))->st == ((vsa_tensor *)lua_touserdata(L, y))->st)
        return vsa_lua_errorf(L, "plugin %s: output %d shares memory with argument %d", p->symbol,
                              x - 12, y - 1);
  double sm = luaL_checknumber(L, 16);
  if (!(sm >= 1e-30 && sm <= 1e30)) return vsa_lua_errorf(L, "plugin %s: sm_scale must be in [1e-30, 1e30]", p->symbol);
  a.sm_scale = (float)sm;
  a.user_data = lua_islightuserdata(L, 17) ? lua_touserdata(L, 17) : NULL;
  if (dev != VSA_CPU) {
    /* The tensors' device is current for the call (set only when it is
     * not: this may run inside a graph capture). */
    int cur = -1;
    cudaError_t e = cudaGetDevice(&cur);
    if (e == cudaSuccess && cur != dev) e = cudaSetDevice(dev);
    if (e != cudaSuccess) vsa_arg_raise_cuda(L, e, "plugin device");
    a.stream = (void *)vsa_stream();
  }
  char err[1024];
  err[0] = 0;
  int rc = p->fn(&a, err, sizeof err);
  if (rc == 0) return 0;
  err[sizeof err - 1] = 0;
  /* A plug-in that faulted the GPU and then returned an error: the sticky
   * CUDA error wins, so the run ends as for our own kernels' faults. */
  if (dev != VSA_CPU) {
    cudaError_t e = cudaStreamQuery(vsa_stream());
    if (e != cudaSuccess && e != cudaErrorNotReady && e != cudaErrorStreamCaptureUnsupported &&
        e != cudaErrorStreamCaptureInvalidated)
      vsa_arg_raise_cuda(L, e, p->symbol);
  }
  return vsa_lua_errorf(L, "backend %s failed: %s (code %d)", p->name,
                        err[0] ? err : "no message", rc);
}

static const luaL_Reg methods[] = {
    {"info", l_plugin_info}, {"backward", l_plugin_backward}, {NULL, NULL}};

static const luaL_Reg functions[] = {{"plugin_open", l_plugin_open}, {NULL, NULL}};

void
vsa_lua_open_plugin(lua_State *L)
{
  luaL_newmetatable(L, VSA_PLUGIN_MT);
  lua_pushcfunction(L, l_plugin_tostring);
  lua_setfield(L, -2, "__tostring");
  lua_newtable(L);
  luaL_register(L, NULL, methods);
  lua_setfield(L, -2, "__index");
  lua_pop(L, 1);
  luaL_register(L, NULL, functions);
}
