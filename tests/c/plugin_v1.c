/* plugin_v1.c — a plug-in as a library built against ABI version 1 exports
 * it: a three-field info (no block sizes or layouts) and a backward that
 * reports what it was handed. vsalab must load it, give it block 64 and
 * BHSD only, and hand it the version-1 struct (tests/lua/plugin_spec.lua). */
#include <stdio.h>

#include "vsalab_plugin.h"

typedef struct {
  uint32_t abi_version, devices, flags;
} v1_info;

VSALAB_PLUGIN_EXPORT const v1_info *
vsalab_plugin_abi(void)
{
  static const v1_info info = {1, VSALAB_PLUGIN_CPU, 0};
  return &info;
}

/* Fails on purpose, its message saying what the call carried. */
VSALAB_PLUGIN_EXPORT int
v1_backward(const vsalab_plugin_args *a, char *err, size_t err_len)
{
  snprintf(err, err_len, "v1 plug-in: abi_version %u, struct_size %u, nq %d", a->abi_version,
           a->struct_size, a->nq);
  return VSALAB_PLUGIN_E_INVALID;
}
