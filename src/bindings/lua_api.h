/* lua_api.h — what every Lua binding file (src/bindings/l_*.c) shares
 * (raising errors: src/bindings/lua_api.c), and each file's registration.
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

/* luaL_error with a full printf format (lua_pushfstring knows only %d, %s,
 * %f, %p, %c): every binding raises through this. */
int vsa_lua_errorf(lua_State *L, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Raise the message recorded by the last failing core call. */
int vsa_lua_raise(lua_State *L);

/* Raise "fn: unknown option 'k' (takes a, b, ...)" on a key of the options
 * table at idx that is not in the NULL-terminated list allowed, so a
 * misspelt option (smscale=) is an error instead of a silent default. */
void vsa_arg_check_keys(lua_State *L, int idx, const char *fn, const char *const *allowed);

/* LuaJIT names the function of "bad argument #n to 'f' (...)" from its
 * caller's bytecode, so a binding reached through pcall(f, ...), a tail
 * call or a method table reads '?'. These raise the same message with the
 * name the function is registered under (in vsalab.core or a vsa.*
 * metatable) when LuaJIT has none; every binding's luaL_argerror,
 * luaL_check*, luaL_opt* and luaL_argcheck go through them. */
int vsa_lua_argerror(lua_State *L, int narg, const char *extramsg);
int vsa_lua_typerror(lua_State *L, int narg, const char *tname);
void vsa_lua_checktype(lua_State *L, int narg, int t);
lua_Number vsa_lua_checknumber(lua_State *L, int narg);
lua_Integer vsa_lua_checkinteger(lua_State *L, int narg);
lua_Integer vsa_lua_optinteger(lua_State *L, int narg, lua_Integer def);
const char *vsa_lua_checklstring(lua_State *L, int narg, size_t *len);
const char *vsa_lua_optlstring(lua_State *L, int narg, const char *def, size_t *len);
void *vsa_lua_checkudata(lua_State *L, int narg, const char *tname);
#define luaL_argerror(L, n, m) vsa_lua_argerror(L, n, m)
#define luaL_typerror(L, n, t) vsa_lua_typerror(L, n, t)
#define luaL_checktype(L, n, t) vsa_lua_checktype(L, n, t)
#define luaL_checknumber(L, n) vsa_lua_checknumber(L, n)
#define luaL_checkinteger(L, n) vsa_lua_checkinteger(L, n)
#define luaL_optinteger(L, n, d) vsa_lua_optinteger(L, n, d)
#define luaL_checklstring(L, n, l) vsa_lua_checklstring(L, n, l)
#define luaL_optlstring(L, n, d, l) vsa_lua_optlstring(L, n, d, l)
#define luaL_checkudata(L, n, t) vsa_lua_checkudata(L, n, t)

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
