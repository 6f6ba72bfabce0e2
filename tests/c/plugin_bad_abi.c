/* plugin_bad_abi.c — a plug-in that claims ABI version 999: vsalab must
 * refuse to load it (tests/lua/plugin_spec.lua). */
#include "vsalab_plugin.h"

VSALAB_PLUGIN_EXPORT const vsalab_plugin_info *
vsalab_plugin_abi(void)
{
  static const vsalab_plugin_info info = {999, VSALAB_PLUGIN_CPU, 0};
  return &info;
}

VSALAB_PLUGIN_EXPORT int
bad_backward(const vsalab_plugin_args *a, char *err, size_t err_len)
{
  return 0;
}
