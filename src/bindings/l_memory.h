/* l_memory.h — memory the Lua bindings hold besides tensors, and giving it
 * back after an out-of-memory (src/bindings/l_memory.c). Below the tensor
 * class: l_tensor.c reclaims through it, and it calls no binding but
 * lua_api.h's error raising. */
#ifndef VSA_L_MEMORY_H
#define VSA_L_MEMORY_H

#include <stddef.h>

#include "bsa.h"
#include "lua_api.h"

/* Grow-only device scratch of at least bytes on dev (one per process), plus
 * two small device structs it keeps beside it; raises on a CUDA failure. */
void *vsa_device_scratch(lua_State *L, int dev, size_t bytes);
/* After an out-of-memory: collect unreachable tensors and free the cached
 * scratch (it only ever grows otherwise), so a retry can succeed. */
void vsa_reclaim_device_memory(lua_State *L);
/* Host tensors live outside the Lua heap (the collector sees a userdata of
 * ~150 bytes for a 64 MiB tensor): after allocating bytes of host memory,
 * collect when host allocations since the last collection exceed
 * max(256 MiB, the host bytes live after it), so unreachable tensors are
 * freed before the process grows to twice its live memory. Not while
 * vsa_gc_stopped (bench holds the stream or captures a graph: a
 * finalizer's cudaFree would wait on it). */
void vsa_host_memory_pressure(lua_State *L, size_t bytes);
extern int vsa_gc_stopped;
extern vsa_list_error *vsa_d_list_error;
extern vsa_compare_sums *vsa_d_compare_sums;

#endif
