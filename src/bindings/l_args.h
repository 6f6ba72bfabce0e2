/* l_args.h — argument checks shared by the Lua bindings
 * (src/bindings/l_args.c). Names follow what they check: vsa_arg_shape raises
 * "<name>: expected shape [..], got [..]", and so on. */
#ifndef VSA_L_ARGS_H
#define VSA_L_ARGS_H

#include "bsa.h"
#include "kernels.h"
#include "l_tensor.h"
#include "lua_api.h"

/* The shapes of an attention problem, read from q and k. */
typedef struct {
  int64_t B, H, Sq, Skv, D;
  int device;
  int block; /* tokens per block, from variable_block_sizes (Skv / its length) */
  int layout; /* vsa_layout of q, k, v, o, dO and the gradients (0: bhsd) */
} attn_dims;

/* Field 'layout' of the table at idx (none or not a table: bhsd): "bhsd"
 * or "bshd", else "layout: 'bsdh' is not supported (supported: bhsd,
 * bshd)". */
int vsa_arg_layout(lua_State *L, int idx);
/* The dimension (0-based) holding the tokens S in a layout: 2 in bhsd
 * [B,H,S,D], 1 in bshd [B,S,H,D]; H is at the other of 1 and 2. */
int vsa_arg_seq_dim(int layout);
/* [B,H,S,D] or [B,S,H,D] into out as the layout orders it. */
void vsa_arg_layout_shape(int layout, int64_t B, int64_t H, int64_t S, int64_t D,
                          int64_t out[4]);
/* A token tensor (q, k, v, o, dO, a gradient) of S tokens a head: raise
 * "dO: shape [1,8,4096,128] does not match layout bshd [B,Sq,H,D] =
 * [1,4096,8,128]" unless t has that shape; sname names S ("Sq", "Skv"). */
void vsa_arg_token_shape(lua_State *L, const vsa_tensor *t, const char *name, int layout,
                         const char *sname, int64_t B, int64_t H, int64_t S, int64_t D);

void vsa_arg_fmt_shape(const int64_t *s, int n, char *buf, size_t len);
void vsa_arg_shape(lua_State *L, const vsa_tensor *t, const char *name, int n,
                   const int64_t *want);
void vsa_arg_device(lua_State *L, const vsa_tensor *t, const char *name, int dev,
                    const char *ref);
/* An index tensor: i32 as is, i64 converted in place on the stack. */
vsa_tensor *vsa_arg_index(lua_State *L, int idx, const char *name, int ndim);
/* Raise naming the first entry of an i64 tensor that no i32 holds (its
 * flat index and value). */
void vsa_arg_check_i64_fits(lua_State *L, const vsa_tensor *t64, const char *name);
/* Raise naming an i64 list entry that no i32 holds (2^32 would become
 * INT32_MAX in the conversion and be reported as that) among the first
 * num[row] entries of each row of idx64 [B,H,rows,width]. */
void vsa_arg_check_i64_entries(lua_State *L, const vsa_tensor *idx64, const vsa_tensor *num,
                               const char *name);
int vsa_arg_int(lua_State *L, int idx, const char *k, int required, long long def,
                long long lo, long long hi);
double vsa_arg_num(lua_State *L, int idx, const char *k, double def);
/* Field 'block' of the table at idx: a supported block size (bsa.h's
 * vsa_block_table), def when absent; otherwise "fn: field 'block' must be
 * a supported block size (64, 128), got ...". */
int vsa_arg_block(lua_State *L, int idx, const char *fn, int def);
/* The block size a variable_block_sizes of nvbs entries implies for a kv
 * sequence of Skv tokens (Skv / nvbs), raising naming variable_block_sizes
 * and the supported sizes when that is not a supported size. The
 * references take their block size from vbs this way. */
int vsa_arg_block_of_vbs(lua_State *L, int64_t Skv, int64_t nvbs);
/* Boolean option k of the table at idx: true/false or 0/1 (sweep axes and
 * key=value arguments give numbers); def when absent; otherwise an error
 * "fn: field 'k' must be a boolean ...". */
int vsa_arg_bool(lua_State *L, int idx, const char *fn, const char *k, int def);
int vsa_arg_field_device(lua_State *L, int idx);
vsa_tensor *vsa_arg_push_on_device(lua_State *L, int h_idx, int dev);
void vsa_arg_raise_cuda(lua_State *L, cudaError_t e, const char *what);

#endif
