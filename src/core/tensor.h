/* tensor.h — the C tensor core: typed, strided, refcounted, CPU or CUDA.
 *
 * A vsa_tensor is a view (dtype, device, shape, strides in elements, offset)
 * onto a refcounted vsa_storage. Views made by narrow/select share storage.
 * Kernels take contiguous row-major tensors; vsa_tensor_contiguous() makes
 * one when a view is not. Every function returns 0 on success or -1 with a
 * message recorded (check.h).
 */
#ifndef VSA_TENSOR_H
#define VSA_TENSOR_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define VSA_MAX_DIMS 8
#define VSA_CPU (-1) /* device ordinal of host memory; CUDA devices are >= 0 */

typedef enum {
  VSA_BF16, /* bfloat16, stored as uint16_t */
  VSA_F32,
  VSA_F64,
  VSA_I32,
  VSA_I64,
  VSA_DTYPE_COUNT
} vsa_dtype;

typedef struct vsa_storage {
  void *ptr;       /* host or device pointer; NULL for 0 bytes */
  size_t bytes;
  int device;      /* VSA_CPU or a CUDA ordinal */
  int refcount;
} vsa_storage;

typedef struct vsa_tensor {
  vsa_storage *st; /* NULL once freed */
  vsa_dtype dtype;
  int device;
  int ndim;
  int64_t shape[VSA_MAX_DIMS];
  int64_t stride[VSA_MAX_DIMS]; /* in elements */
  int64_t offset;               /* in elements */
} vsa_tensor;

/* dtype names as Lua sees them: "bf16", "f32", "f64", "i32", "i64". */
const char *vsa_dtype_name(vsa_dtype t);
int vsa_dtype_parse(const char *name, vsa_dtype *out); /* -1 if unknown */
size_t vsa_dtype_size(vsa_dtype t);

/* Bytes of device memory currently held by live storages (all devices). */
size_t vsa_device_bytes_in_use(void);
/* Bytes of host memory held by live tensor storages. */
size_t vsa_host_bytes_in_use(void);

/* Allocate a contiguous tensor; contents undefined. On an allocation failure
 * (cudaErrorMemoryAllocation, or host malloc) *oom is set to 1, so a caller
 * can collect garbage and retry. */
int vsa_tensor_alloc(vsa_tensor *t, vsa_dtype dtype, int device, int ndim,
                     const int64_t *shape, int *oom);
/* Drop this view's reference (frees the storage at zero). Idempotent. */
void vsa_tensor_release(vsa_tensor *t);
/* Make dst another view of src's storage (takes a reference). */
void vsa_tensor_share(vsa_tensor *dst, const vsa_tensor *src);

int64_t vsa_tensor_numel(const vsa_tensor *t);
int vsa_tensor_is_contiguous(const vsa_tensor *t);
/* Pointer to element 0 of the view (storage ptr + offset). */
void *vsa_tensor_data(const vsa_tensor *t);

/* Views: narrow dim to [start, start+len); select index i of dim (drops it). */
int vsa_tensor_narrow(vsa_tensor *out, const vsa_tensor *t, int dim,
                      int64_t start, int64_t len);
int vsa_tensor_select(vsa_tensor *out, const vsa_tensor *t, int dim,
                      int64_t index);

/* Copy src into dst: same shape, same dtype, any devices and strides. */
int vsa_tensor_copy(vsa_tensor *dst, const vsa_tensor *src);
/* Copy src into dst converting dtype (same shape; dst contiguous). Floats to
 * bf16 round to nearest even; floats to integers truncate toward zero. */
int vsa_tensor_convert(vsa_tensor *dst, const vsa_tensor *src);
/* Fill every element of t (any strides when on the CPU; contiguous on CUDA)
 * with value, converted to t's dtype. NaN stays NaN for float dtypes. */
int vsa_tensor_fill(vsa_tensor *t, double value);
/* Standard normal samples * std + mean, from cuRAND Philox4x32-10 seeded
 * with seed and starting at `offset` in its stream; the host generator is
 * used for CPU tensors (cuRAND documents the same sequence for both). bf16
 * and f64 get f32 samples converted. t must be contiguous. */
int vsa_tensor_randn(vsa_tensor *t, uint64_t seed, uint64_t offset,
                     double mean, double std);

/* Element access on CPU tensors (index in elements from the view start, as
 * computed from strides by the caller). */
double vsa_tensor_get(const vsa_tensor *t, int64_t linear_offset);
void vsa_tensor_set(vsa_tensor *t, int64_t linear_offset, double value);

/* bf16 <-> float on the host (round to nearest even, NaN preserved). */
float vsa_bf16_to_f32(uint16_t h);
uint16_t vsa_f32_to_bf16(float f);

#ifdef __cplusplus
}
#endif

#endif
