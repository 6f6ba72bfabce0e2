/* lua_api.h — what every Lua binding file (src/l_*.c) shares.
 *
 * Bindings follow lauxlib: `static int l_<class>_<method>(lua_State *L)`,
 * arguments checked with luaL_check* and luaL_argcheck (wording: "bad argument
 * #n to 'f' (msg)"), results pushed, count returned. Core failures (check.h)
 * become Lua errors through vsa_lua_raise(). Each file exports one
 * `void vsa_lua_open_<file>(lua_State *L)` that adds its functions to the
 * module table found on top of the stack (and leaves the stack as it was).
 */
#ifndef VSA_LUA_API_H
#define VSA_LUA_API_H

#include <lauxlib.h>
#include <lua.h>

#include "tensor.h"

#define VSA_TENSOR_MT "vsa.Tensor"

/* luaL_error with a full printf format (lua_pushfstring knows only %d, %s,
 * %f, %p, %c): every binding raises through this. */
int vsa_lua_errorf(lua_State *L, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Raise the message recorded by the last failing core call. */
int vsa_lua_raise(lua_State *L);

/* The tensor at idx; raises "bad argument #idx (expected tensor)" if it is
 * not one, or "... (tensor was freed)" after :free(). */
vsa_tensor *vsa_lua_checktensor(lua_State *L, int idx);
/* Like vsa_lua_checktensor, but also checks dtype (dtype < 0: any), ndim
 * (< 0: any) and contiguity; `name` names the argument in messages, e.g.
 * "q2k_idx: expected i32, got f32". The argument is pinned (vsa_lua_pin):
 * slot idx then holds a view of its own, which the returned pointer is. */
vsa_tensor *vsa_lua_checkarg(lua_State *L, int idx, const char *name,
                             int dtype, int ndim);

/* Pin the tensor at idx for the rest of the call: replace that stack slot
 * by a new view sharing its storage (the stack layout does not change), so
 * Lua code that runs meanwhile (an options table's __index, a __gc
 * finalizer) can free or drop the caller's tensor without freeing memory
 * the call still reads. Returns the pinned view; raises "<name>: tensor was
 * freed" if it already was. Every binding taking tensor arguments pins them
 * through vsa_lua_checkarg. */
vsa_tensor *vsa_lua_pin(lua_State *L, int idx, const char *name);

/* Push a new contiguous tensor (contents undefined). A CUDA out-of-memory is
 * retried once after a full Lua GC; any failure raises. */
vsa_tensor *vsa_lua_newtensor(lua_State *L, vsa_dtype dtype, int device,
                              int ndim, const int64_t *shape);

/* The device new CUDA tensors go to (set by --device, default 0). */
int vsa_lua_current_device(void);
void vsa_lua_set_current_device(int device);
/* Raise unless a CUDA device is usable ("no CUDA device: ..."). */
void vsa_lua_require_cuda(lua_State *L);

/* Per-file registration (each adds functions to the table on top). */
void vsa_lua_open_tensor(lua_State *L);
void vsa_lua_open_bsa(lua_State *L);
void vsa_lua_open_bench(lua_State *L);
void vsa_lua_open_db(lua_State *L);
void vsa_lua_open_gemm(lua_State *L);
void vsa_lua_open_check(lua_State *L);
void vsa_lua_open_proc(lua_State *L);
void vsa_lua_open_vsa_lists(lua_State *L);
void vsa_lua_open_plugin(lua_State *L);
void vsa_lua_open_npy(lua_State *L);

#endif
