/* tensor.c — the C tensor core (tensor.h): storage, views, copies,
 * conversion, fill and cuRAND normal samples, on the host or a CUDA device.
 * Device-side element work is in kernels/tensor_ops.cu.
 */
#include "tensor.h"

#include <curand.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "device.h"
#include "kernels.h"

static size_t device_bytes; /* live device bytes, for the GC heuristics */
static size_t host_bytes;   /* live host bytes of tensors, likewise */

// ----------------------------------------------------------------------------
// dtypes and bf16

static const char *const dtype_names[VSA_DTYPE_COUNT] = {"bf16", "f32", "f64",
                                                         "i32", "i64"};
static const size_t dtype_sizes[VSA_DTYPE_COUNT] = {2, 4, 8, 4, 8};

const char *
vsa_dtype_name(vsa_dtype t)
{
  return (unsigned)t < VSA_DTYPE_COUNT ? dtype_names[t] : "?";
}

int
vsa_dtype_parse(const char *name, vsa_dtype *out)
{
  for (int i = 0; i < VSA_DTYPE_COUNT; i++)
    if (strcmp(name, dtype_names[i]) == 0) {
      *out = (vsa_dtype)i;
      return 0;
    }
  return -1;
}

size_t
vsa_dtype_size(vsa_dtype t)
{
  return dtype_sizes[t];
}

float
vsa_bf16_to_f32(uint16_t h)
{
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

uint16_t
vsa_f32_to_bf16(float f)
{
  uint32_t u;
  memcpy(&u, &f, 4);
  if (isnan(f)) return (uint16_t)((u >> 16) | 0x40); /* keep it a NaN */
  u += 0x7fff + ((u >> 16) & 1);                    /* nearest even */
  return (uint16_t)(u >> 16);
}

size_t
vsa_device_bytes_in_use(void)
{
  return device_bytes;
}

size_t
vsa_host_bytes_in_use(void)
{
  return host_bytes;
}

// ----------------------------------------------------------------------------
// storage and views

static void
set_contiguous_strides(vsa_tensor *t)
{
  int64_t s = 1;
  for (int d = t->ndim - 1; d >= 0; d--) {
    t->stride[d] = s;
    s *= t->shape[d];
  }
}

int
vsa_tensor_alloc(vsa_tensor *t, vsa_dtype dtype, int device, int ndim,
                 const int64_t *shape, int *oom)
{
  memset(t, 0, sizeof *t);
  if (oom) *oom = 0;
  if (ndim < 0 || ndim > VSA_MAX_DIMS)
    return vsa_fail("tensor: rank %d outside [0, %d]", ndim, VSA_MAX_DIMS);
  int64_t n = 1;
  for (int d = 0; d < ndim; d++) {
    if (shape[d] < 0)
      return vsa_fail("tensor: dimension %d is negative (%lld)", d,
                      (long long)shape[d]);
    if (shape[d] > 0 && n > INT64_MAX / 8 / shape[d])
      return vsa_fail("tensor: shape too large");
    n *= shape[d];
  }
  vsa_storage *st = calloc(1, sizeof *st);
  if (!st) return vsa_fail("tensor: out of host memory");
  st->bytes = (size_t)n * vsa_dtype_size(dtype);
  st->device = device;
  st->refcount = 1;
  if (st->bytes > 0) {
    if (device == VSA_CPU) {
      st->ptr = malloc(st->bytes);
      if (!st->ptr) {
        size_t bytes = st->bytes;
        free(st);
        if (oom) *oom = 1;
        return vsa_fail("tensor: out of host memory (%zu bytes)", bytes);
      }
      host_bytes += st->bytes;
    } else {
      cudaError_t e = cudaSetDevice(device);
      if (e == cudaSuccess) e = cudaMalloc(&st->ptr, st->bytes);
      if (e != cudaSuccess) {
        size_t bytes = st->bytes;
        free(st);
        if (e == cudaErrorMemoryAllocation && oom) *oom = 1;
        vsa_fail_cuda(e, "cudaMalloc", __FILE__, __LINE__);
        return vsa_fail("%s (asked for %.3f GiB on cuda:%d)",
                        vsa_last_error(), bytes / 1073741824.0, device);
      }
      device_bytes += st->bytes;
    }
  }
  t->st = st;
  t->dtype = dtype;
  t->device = device;
  t->ndim = ndim;
  if (ndim > 0) memcpy(t->shape, shape, sizeof(int64_t) * ndim);
  set_contiguous_strides(t);
  return 0;
}

void
vsa_tensor_release(vsa_tensor *t)
{
  vsa_storage *st = t->st;
  t->st = NULL;
  if (!st || --st->refcount > 0) return;
  if (st->device == VSA_CPU) {
    free(st->ptr);
    host_bytes -= st->bytes;
  } else if (st->ptr) {
    /* A failing free (sticky error after a fault) must not abort __gc. */
    (void)cudaFree(st->ptr);
    (void)cudaGetLastError();
    device_bytes -= st->bytes;
  }
  free(st);
}

void
vsa_tensor_share(vsa_tensor *dst, const vsa_tensor *src)
{
  *dst = *src;
  if (dst->st) dst->st->refcount++;
}

int64_t
vsa_tensor_numel(const vsa_tensor *t)
{
  int64_t n = 1;
  for (int d = 0; d < t->ndim; d++) n *= t->shape[d];
  return n;
}

int
vsa_tensor_is_contiguous(const vsa_tensor *t)
{
  int64_t s = 1;
  for (int d = t->ndim - 1; d >= 0; d--) {
    if (t->shape[d] != 1 && t->stride[d] != s) return 0;
    s *= t->shape[d];
  }
  return 1;
}

void *
vsa_tensor_data(const vsa_tensor *t)
{
  if (!t->st || !t->st->ptr) return NULL;
  return (char *)t->st->ptr + t->offset * (int64_t)vsa_dtype_size(t->dtype);
}

int
vsa_tensor_narrow(vsa_tensor *out, const vsa_tensor *t, int dim,
                  int64_t start, int64_t len)
{
  if (dim < 0 || dim >= t->ndim)
    return vsa_fail("narrow: dim %d outside [0, %d)", dim, t->ndim);
  if (start < 0 || len < 0 || start > t->shape[dim] || len > t->shape[dim] - start)
    return vsa_fail("narrow: [%lld, %lld) outside dim %d of size %lld",
                    (long long)start, (long long)(start + len), dim,
                    (long long)t->shape[dim]);
  vsa_tensor_share(out, t);
  out->offset += start * t->stride[dim];
  out->shape[dim] = len;
  return 0;
}

int
vsa_tensor_select(vsa_tensor *out, const vsa_tensor *t, int dim,
                  int64_t index)
{
  if (dim < 0 || dim >= t->ndim)
    return vsa_fail("select: dim %d outside [0, %d)", dim, t->ndim);
  if (index < 0 || index >= t->shape[dim])
    return vsa_fail("select: index %lld outside dim %d of size %lld",
                    (long long)index, dim, (long long)t->shape[dim]);
  vsa_tensor_share(out, t);
  out->offset += index * t->stride[dim];
  for (int d = dim; d < t->ndim - 1; d++) {
    out->shape[d] = t->shape[d + 1];
    out->stride[d] = t->stride[d + 1];
  }
  out->ndim--;
  return 0;
}

// ----------------------------------------------------------------------------
// host element access

double
vsa_tensor_get(const vsa_tensor *t, int64_t i)
{
  const char *p = vsa_tensor_data(t);
  switch (t->dtype) {
  case VSA_BF16: return vsa_bf16_to_f32(((const uint16_t *)p)[i]);
  case VSA_F32: return ((const float *)p)[i];
  case VSA_F64: return ((const double *)p)[i];
  case VSA_I32: return ((const int32_t *)p)[i];
  case VSA_I64: return (double)((const int64_t *)p)[i];
  default: return NAN;
  }
}

static int64_t
to_int(double v, int64_t lo, int64_t hi)
{
  if (isnan(v)) return 0;
  if (v <= (double)lo) return lo;
  if (v >= (double)hi) return hi;
  return (int64_t)v;
}

void
vsa_tensor_set(vsa_tensor *t, int64_t i, double v)
{
  char *p = vsa_tensor_data(t);
  switch (t->dtype) {
  case VSA_BF16: ((uint16_t *)p)[i] = vsa_f32_to_bf16((float)v); break;
  case VSA_F32: ((float *)p)[i] = (float)v; break;
  case VSA_F64: ((double *)p)[i] = v; break;
  case VSA_I32: ((int32_t *)p)[i] = (int32_t)to_int(v, INT32_MIN, INT32_MAX); break;
  case VSA_I64: ((int64_t *)p)[i] = to_int(v, INT64_MIN, INT64_MAX); break;
  default: break;
  }
}

/* Visit every element offset of a strided view in row-major order. Every
 * VSA_POLL_EVERY elements it polls for an interrupt (a 2^36-element expanded
 * view takes minutes): then `stopped` is set and the loop ends early. */
#define FOR_EACH_OFFSET(t, off, stopped, body)                               \
  do {                                                                       \
    int64_t idx_[VSA_MAX_DIMS] = {0};                                        \
    int64_t n_ = vsa_tensor_numel(t);                                        \
    int64_t off = 0;                                                         \
    for (int64_t k_ = 0; k_ < n_; k_++) {                                    \
      if ((k_ & (VSA_POLL_EVERY - 1)) == VSA_POLL_EVERY - 1 &&               \
          vsa_poll_stop() != 0) {                                            \
        stopped = 1;                                                         \
        break;                                                               \
      }                                                                      \
      body;                                                                  \
      for (int d_ = (t)->ndim - 1; d_ >= 0; d_--) {                          \
        off += (t)->stride[d_];                                              \
        if (++idx_[d_] < (t)->shape[d_]) break;                              \
        off -= (t)->stride[d_] * (t)->shape[d_];                             \
        idx_[d_] = 0;                                                        \
      }                                                                      \
    }                                                                        \
  } while (0)

// ----------------------------------------------------------------------------
// copies and conversion

static int
same_shape(const vsa_tensor *a, const vsa_tensor *b)
{
  if (a->ndim != b->ndim) return 0;
  for (int d = 0; d < a->ndim; d++)
    if (a->shape[d] != b->shape[d]) return 0;
  return 1;
}

static int
check_live(const vsa_tensor *t, const char *what)
{
  if (!t->st) return vsa_fail("%s: tensor was freed", what);
  return 0;
}

/* Make `out` a contiguous tensor with t's contents on t's device (a new
 * reference to t itself when it already is contiguous). */
static int
contiguous_of(vsa_tensor *out, const vsa_tensor *t)
{
  if (vsa_tensor_is_contiguous(t)) {
    vsa_tensor_share(out, t);
    return 0;
  }
  VSA_TRY(vsa_tensor_alloc(out, t->dtype, t->device, t->ndim, t->shape, NULL));
  size_t es = vsa_dtype_size(t->dtype);
  if (t->device == VSA_CPU) {
    const char *src = vsa_tensor_data(t);
    char *dst = vsa_tensor_data(out);
    int64_t k = 0;
    int stopped = 0;
    FOR_EACH_OFFSET(t, off, stopped, memcpy(dst + (k++) * es, src + off * es, es));
    if (stopped) {
      vsa_tensor_release(out);
      return -1;
    }
    return 0;
  }
  cudaError_t e = vsa_strided_copy(vsa_tensor_data(out), vsa_tensor_data(t),
                                   (int)es, t->ndim, t->shape, t->stride, vsa_stream());
  if (e != cudaSuccess) {
    vsa_tensor_release(out);
    return vsa_fail_cuda(e, "vsa_strided_copy", __FILE__, __LINE__);
  }
  return 0;
}

int
vsa_tensor_copy(vsa_tensor *dst, const vsa_tensor *src)
{
  VSA_TRY(check_live(dst, "copy"));
  VSA_TRY(check_live(src, "copy"));
  if (dst->dtype != src->dtype)
    return vsa_fail("copy: dtype %s into %s (use :to_dtype)",
                    vsa_dtype_name(src->dtype), vsa_dtype_name(dst->dtype));
  if (!same_shape(dst, src)) return vsa_fail("copy: shapes differ");
  size_t es = vsa_dtype_size(src->dtype);
  int64_t n = vsa_tensor_numel(src);
  if (n == 0) return 0;
  if (dst->device == VSA_CPU && src->device == VSA_CPU &&
      !vsa_tensor_is_contiguous(dst)) {
    /* Host scatter into a strided view, element by element. */
    vsa_tensor c;
    VSA_TRY(contiguous_of(&c, src));
    const char *s = vsa_tensor_data(&c);
    char *d = vsa_tensor_data(dst);
    int64_t k = 0;
    int stopped = 0;
    FOR_EACH_OFFSET(dst, off, stopped, memcpy(d + off * es, s + (k++) * es, es));
    vsa_tensor_release(&c);
    return stopped ? -1 : 0;
  }
  if (!vsa_tensor_is_contiguous(dst))
    return vsa_fail("copy: destination on cuda must be contiguous");
  vsa_tensor c;
  VSA_TRY(contiguous_of(&c, src));
  cudaError_t e = cudaSuccess;
  if (dst->device == VSA_CPU && src->device == VSA_CPU) /* no driver needed */
    memcpy(vsa_tensor_data(dst), vsa_tensor_data(&c), (size_t)n * es);
  else
    e = cudaMemcpy(vsa_tensor_data(dst), vsa_tensor_data(&c), (size_t)n * es,
                   cudaMemcpyDefault);
  vsa_tensor_release(&c);
  if (e != cudaSuccess) return vsa_fail_cuda(e, "cudaMemcpy", __FILE__, __LINE__);
  return 0;
}

int
vsa_tensor_convert(vsa_tensor *dst, const vsa_tensor *src)
{
  VSA_TRY(check_live(dst, "convert"));
  VSA_TRY(check_live(src, "convert"));
  if (!same_shape(dst, src)) return vsa_fail("convert: shapes differ");
  if (!vsa_tensor_is_contiguous(dst))
    return vsa_fail("convert: destination must be contiguous");
  if (dst->device != src->device)
    return vsa_fail("convert: tensors on different devices");
  vsa_tensor c;
  VSA_TRY(contiguous_of(&c, src));
  int64_t n = vsa_tensor_numel(src);
  if (src->device == VSA_CPU) {
    for (int64_t i = 0; i < n; i++) {
      if ((i & (VSA_POLL_EVERY - 1)) == VSA_POLL_EVERY - 1 && vsa_poll_stop() != 0) {
        vsa_tensor_release(&c);
        return -1;
      }
      vsa_tensor_set(dst, i, vsa_tensor_get(&c, i));
    }
    vsa_tensor_release(&c);
    return 0;
  }
  cudaError_t e = vsa_convert(vsa_tensor_data(dst), dst->dtype,
                              vsa_tensor_data(&c), c.dtype, n, vsa_stream());
  vsa_tensor_release(&c);
  if (e != cudaSuccess) return vsa_fail_cuda(e, "vsa_convert", __FILE__, __LINE__);
  return 0;
}

int
vsa_tensor_fill(vsa_tensor *t, double value)
{
  VSA_TRY(check_live(t, "fill"));
  if (t->device == VSA_CPU) {
    /* Integer dtypes: NaN has no meaning there; keep what set() does. */
    vsa_tensor one;
    VSA_TRY(vsa_tensor_alloc(&one, t->dtype, VSA_CPU, 0, NULL, NULL));
    vsa_tensor_set(&one, 0, value);
    size_t es = vsa_dtype_size(t->dtype);
    const char *v = vsa_tensor_data(&one);
    char *d = vsa_tensor_data(t);
    int stopped = 0;
    FOR_EACH_OFFSET(t, off, stopped, memcpy(d + off * es, v, es));
    vsa_tensor_release(&one);
    return stopped ? -1 : 0;
  }
  if (!vsa_tensor_is_contiguous(t))
    return vsa_fail("fill: a cuda tensor must be contiguous");
  cudaError_t e = vsa_fill(vsa_tensor_data(t), t->dtype, vsa_tensor_numel(t),
                           value, vsa_stream());
  if (e != cudaSuccess) return vsa_fail_cuda(e, "vsa_fill", __FILE__, __LINE__);
  return 0;
}

// ----------------------------------------------------------------------------
// cuRAND normal samples

static int
curand_fail(curandStatus_t s, const char *what)
{
  return vsa_fail("curand: status %d in %s", (int)s, what);
}

#define CURAND_TRY(call)                                                     \
  do {                                                                       \
    curandStatus_t s_ = (call);                                              \
    if (s_ != CURAND_STATUS_SUCCESS) {                                       \
      rc = curand_fail(s_, #call);                                           \
      goto done;                                                             \
    }                                                                        \
  } while (0)

int
vsa_tensor_randn(vsa_tensor *t, uint64_t seed, uint64_t offset, double mean,
                 double std)
{
  VSA_TRY(check_live(t, "randn"));
  if (t->dtype == VSA_I32 || t->dtype == VSA_I64)
    return vsa_fail("fill_randn: integer dtype %s", vsa_dtype_name(t->dtype));
  if (!vsa_tensor_is_contiguous(t))
    return vsa_fail("fill_randn: tensor must be contiguous");
  int64_t n = vsa_tensor_numel(t);
  if (n == 0) return 0;
  /* cuRAND's normal generators emit pairs: generate an even count. */
  int64_t n2 = (n + 1) & ~(int64_t)1;
  int rc = 0;
  curandGenerator_t g = NULL;
  float *buf = NULL;
  int on_host = t->device == VSA_CPU;
  int direct = t->dtype == VSA_F32 && n2 == n;
  if (on_host) {
    CURAND_TRY(curandCreateGeneratorHost(&g, CURAND_RNG_PSEUDO_PHILOX4_32_10));
    buf = direct ? vsa_tensor_data(t) : malloc((size_t)n2 * sizeof(float));
    if (!buf) {
      rc = vsa_fail("fill_randn: out of host memory");
      goto done;
    }
  } else {
    cudaError_t e = cudaSetDevice(t->device);
    if (e == cudaSuccess && !direct)
      e = cudaMalloc((void **)&buf, (size_t)n2 * sizeof(float));
    if (e != cudaSuccess) {
      rc = vsa_fail_cuda(e, "randn scratch", __FILE__, __LINE__);
      goto done;
    }
    if (direct) buf = vsa_tensor_data(t);
    CURAND_TRY(curandCreateGenerator(&g, CURAND_RNG_PSEUDO_PHILOX4_32_10));
  }
  CURAND_TRY(curandSetPseudoRandomGeneratorSeed(g, seed));
  CURAND_TRY(curandSetGeneratorOffset(g, offset));
  CURAND_TRY(curandGenerateNormal(g, buf, (size_t)n2, (float)mean, (float)std));
  if (!direct) {
    if (on_host) {
      for (int64_t i = 0; i < n && rc == 0; i++) {
        if ((i & (VSA_POLL_EVERY - 1)) == VSA_POLL_EVERY - 1) rc = vsa_poll_stop();
        vsa_tensor_set(t, i, buf[i]);
      }
    } else {
      cudaError_t e = vsa_convert(vsa_tensor_data(t), t->dtype, buf, VSA_F32,
                                  n, 0);
      if (e == cudaSuccess) e = cudaDeviceSynchronize();
      if (e != cudaSuccess) rc = vsa_fail_cuda(e, "randn convert", __FILE__, __LINE__);
    }
  }
done:
  if (g) curandDestroyGenerator(g);
  if (!direct && buf) {
    if (on_host) free(buf);
    else (void)cudaFree(buf);
  }
  return rc;
}
