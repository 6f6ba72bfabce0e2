/* vsalab_plugin.h — the C ABI of a vsalab plug-in backward (ABI version 2).
 *
 * A plug-in is a shared library that vsalab dlopens at run time:
 *
 *   vsalab.backends.load{path = "libmine.so", symbol = "my_backward",
 *                        name = "mine", supported = function(device, p) end}
 *   vsalab run experiments/seed_sweep.lua plugin=path/libmine.so
 *
 * It then runs in every experiment, spot check, `vsalab.cases.run`,
 * `compare`, `rerun` and `report`, checked against vsalab's fp64 oracle and
 * timed by the same bench as vsalab's own kernels. This header is the whole
 * contract: it includes nothing but <stddef.h> and <stdint.h>, so a plug-in
 * builds without CUDA or vsalab's sources (examples/plugins/ has a CPU one in
 * plain C and a CUDA one).
 *
 * A library exports:
 *   1. once, `vsalab_plugin_abi`: write VSALAB_PLUGIN_DEFINE(devices, flags)
 *      in one source file (block size 64 and the BHSD layout only), or
 *      VSALAB_PLUGIN_DEFINE_SHAPES(devices, flags, blocks, layouts) for the
 *      block sizes and token layouts the library takes. vsalab refuses a
 *      library without it, or built against an ABI version it does not
 *      speak (the message names both); it speaks versions 1 and 2, and gives
 *      a version-1 library block 64 and BHSD only.
 *   2. one or more backward functions of type vsalab_plugin_backward_fn,
 *      with C linkage and default visibility, under any name (`symbol`).
 *
 * The call. vsalab hands the backward one vsalab_plugin_args:
 *   - Every tensor is contiguous row-major (stride[ndim-1] = 1; strides are
 *     given in elements anyway), on one device: args->device is -1 for the
 *     CPU, and then every `data` is a HOST pointer; otherwise it is the CUDA
 *     ordinal and every `data` is a DEVICE pointer on that GPU, the current
 *     device at the call.
 *   - args->block: tokens per q block and per kv block (64 or 128, one the
 *     library declared); args->layout: the token layout of q, k, v, o, dO,
 *     dq, dk, dv, VSALAB_PLUGIN_BHSD ([B,H,S,D], the default) or
 *     VSALAB_PLUGIN_BSHD ([B,S,H,D], FastVideo's and cuDNN's order), one the
 *     library declared. Either way every tensor is contiguous; its shape and
 *     strides say the same.
 *   - Inputs (read only): q, o, dO [B,H,Sq,D] bf16 (or [B,Sq,H,D]); k, v
 *     [B,H,Skv,D] bf16 (or [B,Skv,H,D]); lse [B,H,Sq] f32 in Triton's
 *     base-2 "M format" (vsalab docs/lua-api.md, "Conventions") in either
 *     layout; variable_block_sizes [nkv] i32 in [0, block]: key t of kv
 *     block j is valid iff t mod block < vbs[j]; q2k_idx [B,H,nq,nkv] i32 and
 *     q2k_num [B,H,nq] i32; k2q_idx [B,H,nkv,nq] i32 and k2q_num [B,H,nkv]
 *     i32. nq = Sq/block, nkv = Skv/block, 0-based block ids.
 *     The lists are canonical: validated by vsalab, each row ascending with
 *     no repeats, the same selected pairs in both (q2k is the transpose of
 *     k2q); entries past a row's count are -1. A row or column selected by
 *     nothing has count 0.
 *   - Outputs (write every element): dq [B,H,Sq,D], dk, dv [B,H,Skv,D], bf16
 *     (in args->layout, as q and k).
 *     vsalab fills them with NaN before a checked call, so an element the
 *     plug-in misses fails the check. dq and dk include sm_scale. A kv block
 *     nothing selects must get dk = dv = 0; a q row with no valid key dq = 0.
 *     Write nothing outside them: each output sits between two 4 KB guard
 *     zones (host or device memory alike), checked after the checked call
 *     and after the timed calls; a changed zone fails the point, naming the
 *     output ("wrote outside dq: ... before it changed").
 *   - Formulas (FlashAttention-2's, base 2 as in Triton's VSA kernel):
 *     P = exp2(s*sm_scale*log2(e) - lse) on valid keys of selected blocks,
 *     0 elsewhere; Delta = rowsum(dO*o); dP = dO v^T; dS = P*(dP - Delta);
 *     dv = P^T dO; dk = sm_scale * dS^T q; dq = sm_scale * dS k.
 *   - stream: on CUDA, the cudaStream_t to launch on (cast it); NULL on the
 *     CPU. Launch only on it: it is the stream vsalab times (with CUDA events
 *     around the call, the stream held by a spin kernel while the call queues
 *     its work) and, under --timing graph, the stream being captured.
 *   - user_data: the pointer given to vsalab.backends.load{user_data=}
 *     (a light userdata), else NULL.
 *   - The call may come from the timing loop many times with the same
 *     buffers; it must not keep pointers past its return.
 *
 * Return 0 on success. On failure return a non-zero code (VSALAB_PLUGIN_E_*
 * or your own) and write a NUL-terminated message into err (err_len bytes,
 * at least 256): vsalab logs the point as failed with that message and the
 * sweep goes on. A plug-in that faults the GPU (an illegal address) is
 * treated like vsalab's own kernels: the run ends `failed`, every row
 * measured before it kept.
 *
 * Flags (VSALAB_PLUGIN_DEFINE's second argument):
 *   VSALAB_PLUGIN_CAPTURABLE  on CUDA, the backward only queues work on
 *     `stream`: it neither allocates nor frees device memory, copies to the
 *     host nor synchronises. vsalab then holds the stream while timing (host
 *     launch gaps are not timed) and `--timing graph` captures the call in a
 *     CUDA graph. Without it vsalab times with hold=false and in `hot` mode.
 *     A flagged plug-in that synchronises fails its timing with "waited on
 *     the GPU while the stream was held".
 * Devices (VSALAB_PLUGIN_DEFINE's first argument): VSALAB_PLUGIN_CPU and/or
 * VSALAB_PLUGIN_CUDA: vsalab never calls the plug-in with tensors elsewhere.
 *
 * Block sizes and layouts (VSALAB_PLUGIN_DEFINE_SHAPES's last two
 * arguments): VSALAB_PLUGIN_BLOCK_64 and/or VSALAB_PLUGIN_BLOCK_128, and
 * VSALAB_PLUGIN_LAYOUT_BHSD and/or VSALAB_PLUGIN_LAYOUT_BSHD: vsalab skips
 * the points a library does not take, with a row saying why.
 *
 * Versioning: VSALAB_PLUGIN_ABI_VERSION changes whenever a struct layout or
 * the meaning of a field changes; fields are only ever appended, and
 * args->struct_size tells a plug-in how much of the struct exists. Version
 * 2 appended args->block and args->layout and the info's blocks and
 * layouts.
 */
#ifndef VSALAB_PLUGIN_H
#define VSALAB_PLUGIN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define VSALAB_PLUGIN_ABI_VERSION 2

/* dtypes of vsalab_plugin_tensor (bf16 is stored as uint16_t). */
enum {
  VSALAB_PLUGIN_BF16 = 0,
  VSALAB_PLUGIN_F32 = 1,
  VSALAB_PLUGIN_F64 = 2,
  VSALAB_PLUGIN_I32 = 3,
  VSALAB_PLUGIN_I64 = 4
};

/* Devices a library takes (bit set). */
#define VSALAB_PLUGIN_CPU 1u
#define VSALAB_PLUGIN_CUDA 2u
/* Library flags. */
#define VSALAB_PLUGIN_CAPTURABLE 1u

/* Block sizes a library takes (bit set). */
#define VSALAB_PLUGIN_BLOCK_64 1u
#define VSALAB_PLUGIN_BLOCK_128 2u

/* Token layouts a library takes (bit set), and args->layout's values. */
#define VSALAB_PLUGIN_LAYOUT_BHSD 1u
#define VSALAB_PLUGIN_LAYOUT_BSHD 2u
enum { VSALAB_PLUGIN_BHSD = 0, VSALAB_PLUGIN_BSHD = 1 };

/* Error codes a backward may return (any non-zero value is an error). */
enum {
  VSALAB_PLUGIN_OK = 0,
  VSALAB_PLUGIN_E_UNSUPPORTED = 1, /* shapes or device it does not take */
  VSALAB_PLUGIN_E_INVALID = 2,     /* inputs it refuses */
  VSALAB_PLUGIN_E_CUDA = 3,        /* a CUDA call failed */
  VSALAB_PLUGIN_E_INTERNAL = 4
};

typedef struct {
  void *data;         /* host (device == -1) or device pointer to element 0 */
  int32_t dtype;      /* VSALAB_PLUGIN_BF16 ... */
  int32_t ndim;       /* 1..4 */
  int64_t shape[4];   /* unused dims are 1 */
  int64_t stride[4];  /* in elements; contiguous row-major */
} vsalab_plugin_tensor;

typedef struct {
  uint32_t abi_version; /* VSALAB_PLUGIN_ABI_VERSION of vsalab */
  uint32_t struct_size; /* sizeof(vsalab_plugin_args) in vsalab */
  int32_t device;       /* -1: CPU, host pointers; >= 0: CUDA ordinal */
  int32_t B, H, Sq, Skv, D, nq, nkv;
  float sm_scale;
  /* inputs */
  vsalab_plugin_tensor q, k, v, dO, o, lse;
  vsalab_plugin_tensor q2k_idx, q2k_num, k2q_idx, k2q_num, variable_block_sizes;
  /* outputs */
  vsalab_plugin_tensor dq, dk, dv;
  void *stream;    /* cudaStream_t on CUDA, NULL on the CPU */
  void *user_data; /* vsalab.backends.load{user_data=}, else NULL */
  /* version 2 */
  int32_t block;   /* tokens per block: 64 or 128 */
  int32_t layout;  /* VSALAB_PLUGIN_BHSD or VSALAB_PLUGIN_BSHD */
} vsalab_plugin_args;

/* A backward: 0 on success, else an error code and a message in err. */
typedef int (*vsalab_plugin_backward_fn)(const vsalab_plugin_args *args,
                                         char *err, size_t err_len);

/* What VSALAB_PLUGIN_DEFINE exports. */
typedef struct {
  uint32_t abi_version; /* VSALAB_PLUGIN_ABI_VERSION the library was built with */
  uint32_t devices;     /* VSALAB_PLUGIN_CPU | VSALAB_PLUGIN_CUDA */
  uint32_t flags;       /* VSALAB_PLUGIN_CAPTURABLE */
  /* version 2 */
  uint32_t blocks;      /* VSALAB_PLUGIN_BLOCK_64 | VSALAB_PLUGIN_BLOCK_128 */
  uint32_t layouts;     /* VSALAB_PLUGIN_LAYOUT_BHSD | VSALAB_PLUGIN_LAYOUT_BSHD */
} vsalab_plugin_info;

#if defined(_WIN32)
#define VSALAB_PLUGIN_EXPORT __declspec(dllexport)
#else
#define VSALAB_PLUGIN_EXPORT __attribute__((visibility("default")))
#endif

#ifdef __cplusplus
#define VSALAB_PLUGIN_EXTERN_C extern "C"
#else
#define VSALAB_PLUGIN_EXTERN_C
#endif

/* Put one of these once in a plug-in source file. */
#define VSALAB_PLUGIN_DEFINE_SHAPES(devices_, flags_, blocks_, layouts_)        \
  VSALAB_PLUGIN_EXTERN_C VSALAB_PLUGIN_EXPORT const vsalab_plugin_info *       \
  vsalab_plugin_abi(void)                                                      \
  {                                                                            \
    static const vsalab_plugin_info info = {VSALAB_PLUGIN_ABI_VERSION,         \
                                            (devices_), (flags_), (blocks_),   \
                                            (layouts_)};                       \
    return &info;                                                              \
  }
/* Block size 64 and BHSD only (what every version-1 library takes). */
#define VSALAB_PLUGIN_DEFINE(devices_, flags_)                                 \
  VSALAB_PLUGIN_DEFINE_SHAPES((devices_), (flags_), VSALAB_PLUGIN_BLOCK_64,    \
                              VSALAB_PLUGIN_LAYOUT_BHSD)

/* The name vsalab looks up for the library's info. */
#define VSALAB_PLUGIN_ABI_SYMBOL "vsalab_plugin_abi"

#ifdef __cplusplus
}
#endif

#endif
