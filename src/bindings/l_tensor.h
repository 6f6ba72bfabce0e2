/* l_tensor.h — the vsa.Tensor Lua class in C (src/bindings/l_tensor.c):
 * checking tensor arguments, pushing new tensors, and the device new CUDA
 * tensors go to. */
#ifndef VSA_L_TENSOR_H
#define VSA_L_TENSOR_H

#include <lua.h>

#include "tensor.h"

#define VSA_TENSOR_MT "vsa.Tensor"

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

#endif
