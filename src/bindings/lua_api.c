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

// ----------------------------------------------------------------------------
// argument errors naming the function (lua_api.h)

/* The string key under which table t holds the value at f, or NULL. The
 * key stays anchored by t. */
static const char *
key_of(lua_State *L, int t, int f)
{
  lua_pushnil(L);
  while (lua_next(L, t) != 0) {
    if (lua_rawequal(L, -1, f) && lua_type(L, -2) == LUA_TSTRING) {
      const char *k = lua_tostring(L, -2);
      lua_pop(L, 2);
      return k;
    }
    lua_pop(L, 1);
  }
  return NULL;
}

/* The name the running C function is registered under: a field of
 * vsalab.core, or a method or metamethod of a vsa.* metatable (its
 * "methods" or __index table, or itself); NULL when none. */
static const char *
registered_name(lua_State *L)
{
  lua_Debug ar;
  if (!lua_checkstack(L, 8) || !lua_getstack(L, 0, &ar) || !lua_getinfo(L, "f", &ar))
    return NULL;
  int top = lua_gettop(L), f = top;
  const char *name = NULL;
  lua_getfield(L, LUA_REGISTRYINDEX, "_LOADED");
  if (lua_istable(L, -1)) lua_getfield(L, -1, "vsalab.core");
  if (lua_istable(L, -1)) name = key_of(L, lua_gettop(L), f);
  lua_settop(L, top);
  lua_pushnil(L);
  while (!name && lua_next(L, LUA_REGISTRYINDEX) != 0) {
    int mt = lua_gettop(L);
    if (lua_type(L, -2) == LUA_TSTRING && strncmp(lua_tostring(L, -2), "vsa.", 4) == 0 &&
        lua_istable(L, mt)) {
      name = key_of(L, mt, f);
      for (int i = 0; i < 2 && !name; i++) {
        lua_getfield(L, mt, i ? "__index" : "methods");
        if (lua_istable(L, -1)) name = key_of(L, lua_gettop(L), f);
        lua_pop(L, 1);
      }
    }
    lua_settop(L, mt - 1); /* the key, for lua_next */
  }
  lua_settop(L, top - 1);
  return name;
}

int
vsa_lua_argerror(lua_State *L, int narg, const char *extramsg)
{
  lua_Debug ar;
  const char *name = NULL;
  if (lua_getstack(L, 0, &ar) && lua_getinfo(L, "n", &ar) && !ar.name)
    name = registered_name(L);
  if (!name) return (luaL_argerror)(L, narg, extramsg); /* LuaJIT's own name */
  return luaL_error(L, "bad argument #%d to '%s' (%s)", narg, name, extramsg);
}

int
vsa_lua_typerror(lua_State *L, int narg, const char *tname)
{
  return vsa_lua_argerror(L, narg, lua_pushfstring(L, "%s expected, got %s", tname,
                                                   luaL_typename(L, narg)));
}

void
vsa_lua_checktype(lua_State *L, int narg, int t)
{
  if (lua_type(L, narg) != t) vsa_lua_typerror(L, narg, lua_typename(L, t));
}

lua_Number
vsa_lua_checknumber(lua_State *L, int narg)
{
  if (!lua_isnumber(L, narg)) vsa_lua_typerror(L, narg, "number");
  return lua_tonumber(L, narg);
}

lua_Integer
vsa_lua_checkinteger(lua_State *L, int narg)
{
  if (!lua_isnumber(L, narg)) vsa_lua_typerror(L, narg, "number");
  return lua_tointeger(L, narg);
}

lua_Integer
vsa_lua_optinteger(lua_State *L, int narg, lua_Integer def)
{
  return lua_isnoneornil(L, narg) ? def : vsa_lua_checkinteger(L, narg);
}

const char *
vsa_lua_checklstring(lua_State *L, int narg, size_t *len)
{
  const char *s = lua_tolstring(L, narg, len);
  if (!s) vsa_lua_typerror(L, narg, "string");
  return s;
}

const char *
vsa_lua_optlstring(lua_State *L, int narg, const char *def, size_t *len)
{
  if (!lua_isnoneornil(L, narg)) return vsa_lua_checklstring(L, narg, len);
  if (len) *len = def ? strlen(def) : 0;
  return def;
}

void *
vsa_lua_checkudata(lua_State *L, int narg, const char *tname)
{
  void *p = luaL_testudata(L, narg, tname);
  if (!p) vsa_lua_typerror(L, narg, tname);
  return p;
}
