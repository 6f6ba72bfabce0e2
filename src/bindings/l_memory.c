/* l_memory.c — memory the Lua bindings hold besides tensors, and giving it
 * back (l_memory.h): the grow-only device scratch (inversion bitmaps, the
 * list-error and compare structs), the collector's pace for host tensors,
 * and the reclaim after an out-of-memory that lets a retry succeed.
 */
#include "l_memory.h"

#include "check.h"
#include "tensor.h"

static void *scratch;
static size_t scratch_bytes;
static int scratch_device = -2;
vsa_list_error *vsa_d_list_error;
vsa_compare_sums *vsa_d_compare_sums;

int vsa_gc_stopped;
static size_t host_since_gc, host_live_after_gc;

void
vsa_host_memory_pressure(lua_State *L, size_t bytes)
{
  host_since_gc += bytes;
  size_t floor_ = (size_t)256 << 20;
  if (vsa_gc_stopped || host_since_gc <= (host_live_after_gc > floor_ ? host_live_after_gc : floor_))
    return;
  lua_gc(L, LUA_GCCOLLECT, 0);
  host_since_gc = 0;
  host_live_after_gc = vsa_host_bytes_in_use();
}

void
vsa_reclaim_device_memory(lua_State *L)
{
  lua_gc(L, LUA_GCCOLLECT, 0);
  if (scratch) cudaFree(scratch);
  scratch = NULL;
  scratch_bytes = 0;
  (void)cudaGetLastError();
}

void *
vsa_device_scratch(lua_State *L, int dev, size_t bytes)
{
  if (scratch_device != dev) {
    if (scratch) cudaFree(scratch);
    if (vsa_d_list_error) cudaFree(vsa_d_list_error);
    if (vsa_d_compare_sums) cudaFree(vsa_d_compare_sums);
    scratch = NULL;
    vsa_d_list_error = NULL;
    vsa_d_compare_sums = NULL;
    scratch_bytes = 0;
    scratch_device = dev;
  }
  cudaError_t e = cudaSetDevice(dev);
  if (e == cudaSuccess && !vsa_d_list_error)
    e = cudaMalloc((void **)&vsa_d_list_error, sizeof *vsa_d_list_error);
  if (e == cudaSuccess && !vsa_d_compare_sums)
    e = cudaMalloc((void **)&vsa_d_compare_sums, sizeof *vsa_d_compare_sums);
  if (e == cudaSuccess && bytes > scratch_bytes) {
    if (scratch) cudaFree(scratch);
    scratch = NULL;
    scratch_bytes = 0;
    e = cudaMalloc(&scratch, bytes);
    if (e == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      lua_gc(L, LUA_GCCOLLECT, 0);
      e = cudaMalloc(&scratch, bytes);
    }
    if (e == cudaSuccess) scratch_bytes = bytes;
  }
  if (e != cudaSuccess) {
    vsa_fail_cuda(e, "scratch allocation", __FILE__, __LINE__);
    vsa_lua_raise(L);
  }
  return scratch;
}
