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
