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
} attn_dims;

void vsa_arg_fmt_shape(const int64_t *s, int n, char *buf, size_t len);
void vsa_arg_shape(lua_State *L, const vsa_tensor *t, const char *name, int n,
                   const int64_t *want);
void vsa_arg_device(lua_State *L, const vsa_tensor *t, const char *name, int dev,
                    const char *ref);
/* An index tensor: i32 as is, i64 converted in place on the stack. */
vsa_tensor *vsa_arg_index(lua_State *L, int idx, const char *name, int ndim);
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
