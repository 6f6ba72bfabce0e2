/* lua_api.c — the basics every Lua binding shares (lua_api.h): raising a
 * Lua error with a printf format or from the last core failure, and
 * refusing an options table's unknown keys.
 */
#include "lua_api.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "check.h"

int
vsa_lua_errorf(lua_State *L, const char *fmt, ...)
{
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  return luaL_error(L, "%s", buf);
}

int
vsa_lua_raise(lua_State *L)
{
  return vsa_lua_errorf(L, "%s", vsa_last_error());
}

/* Raise on a key of the options table at idx that fn does not take, so a
 * misspelt option (smscale=) is an error instead of a silent default. */
void
vsa_arg_check_keys(lua_State *L, int idx, const char *fn, const char *const *allowed)
{
  if (!lua_istable(L, idx)) return;
  lua_pushnil(L);
  while (lua_next(L, idx) != 0) {
    lua_pop(L, 1);
    const char *k = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : NULL;
    int ok = 0;
    for (int i = 0; k && allowed[i]; i++) ok |= strcmp(k, allowed[i]) == 0;
    if (!ok) {
      char list[256] = "";
      for (int i = 0; allowed[i]; i++) {
        strncat(list, i ? ", " : "", sizeof list - strlen(list) - 1);
        strncat(list, allowed[i], sizeof list - strlen(list) - 1);
      }
      vsa_lua_errorf(L, "%s: unknown option '%s' (takes %s)", fn,
                     k ? k : luaL_typename(L, -1), list);
    }
  }
}
