/* l_gemm.c — vsalab.gemm_ceiling: the bf16 GEMM rate of this GPU through
 * cuBLAS, measured in the same run as the kernels so reports can give each
 * figure as a percentage of it (METHOD.md: measure the ceilings yourself).
 *
 * gemm_ceiling{n=8192, warmup=3, repeats=10} -> {tflops, ms, n}: C = A·B
 * with A, B, C bf16 n×n (column-major, no transposes), fp32 accumulation
 * (CUBLAS_COMPUTE_32F), inputs from cuRAND normal samples (never zeros: they
 * run faster than real data), median of CUDA-event timings, 2·n³ flops.
 * cuBLAS is opened with dlopen at the first call, so the binary starts on
 * hosts without it (the call then raises).
 */
#include <cublas_v2.h>
#include <dlfcn.h>
#include <math.h>
#include <stdlib.h>

#include "check.h"
#include "l_tensor.h"
#include "lua_api.h"

static int
cmp_double(const void *a, const void *b)
{
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static struct {
  int state; /* 0 untried, 1 ready, -1 missing */
  cublasStatus_t (*create)(cublasHandle_t *);
  cublasStatus_t (*destroy)(cublasHandle_t);
  cublasStatus_t (*gemm)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                         const void *, const void *, cudaDataType, int, const void *,
                         cudaDataType, int, const void *, void *, cudaDataType, int,
                         cublasComputeType_t, cublasGemmAlgo_t);
} cb;

static int
load_cublas(void)
{
  if (cb.state) return cb.state;
  cb.state = -1;
  void *h = dlopen("libcublas.so.13", RTLD_NOW | RTLD_LOCAL);
  if (!h) h = dlopen("libcublas.so", RTLD_NOW | RTLD_LOCAL);
  if (!h) return -1;
  cb.create = (cublasStatus_t (*)(cublasHandle_t *))dlsym(h, "cublasCreate_v2");
  cb.destroy = (cublasStatus_t (*)(cublasHandle_t))dlsym(h, "cublasDestroy_v2");
  *(void **)&cb.gemm = dlsym(h, "cublasGemmEx");
  if (!cb.create || !cb.destroy || !cb.gemm) return -1;
  cb.state = 1;
  return 1;
}

static int
l_gemm_ceiling(lua_State *L)
{
  int n = 8192, warmup = 3, repeats = 10;
  if (lua_istable(L, 1)) {
    lua_getfield(L, 1, "n");
    if (!lua_isnil(L, -1)) n = (int)luaL_checkinteger(L, -1);
    lua_getfield(L, 1, "warmup");
    if (!lua_isnil(L, -1)) warmup = (int)luaL_checkinteger(L, -1);
    lua_getfield(L, 1, "repeats");
    if (!lua_isnil(L, -1)) repeats = (int)luaL_checkinteger(L, -1);
    lua_pop(L, 3);
  }
  if (n < 64 || n > 32768 || n % 64 || warmup < 0 || warmup > 100 || repeats < 1 || repeats > 1000)
    return vsa_lua_errorf(L, "gemm_ceiling: n must be a multiple of 64 in [64, 32768], "
                             "warmup in [0, 100], repeats in [1, 1000]");
  vsa_lua_require_cuda(L);
  if (load_cublas() < 0)
    return vsa_lua_errorf(L, "gemm_ceiling: cuBLAS (libcublas.so.13) not found");
  int64_t shape[2] = {n, n};
  vsa_tensor *a = vsa_lua_newtensor(L, VSA_BF16, vsa_lua_current_device(), 2, shape);
  vsa_tensor *b = vsa_lua_newtensor(L, VSA_BF16, vsa_lua_current_device(), 2, shape);
  vsa_tensor *c = vsa_lua_newtensor(L, VSA_BF16, vsa_lua_current_device(), 2, shape);
  if (vsa_tensor_randn(a, 11, 0, 0, 1) || vsa_tensor_randn(b, 12, 0, 0, 1)) return vsa_lua_raise(L);
  cublasHandle_t h = NULL;
  cudaEvent_t e0 = NULL, e1 = NULL;
  double *ms = calloc((size_t)repeats, sizeof *ms);
  const char *failed = NULL;
  if (!ms) failed = "out of host memory";
  if (!failed && cb.create(&h) != CUBLAS_STATUS_SUCCESS) failed = "cublasCreate";
  if (!failed && (cudaEventCreate(&e0) != cudaSuccess || cudaEventCreate(&e1) != cudaSuccess))
    failed = "cudaEventCreate";
  const float one = 1.f, zero = 0.f;
  for (int i = 0; !failed && i < warmup + repeats; i++) {
    if (i >= warmup) cudaEventRecord(e0, 0);
    if (cb.gemm(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, vsa_tensor_data(a), CUDA_R_16BF, n,
                     vsa_tensor_data(b), CUDA_R_16BF, n, &zero, vsa_tensor_data(c), CUDA_R_16BF, n,
                     CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT) != CUBLAS_STATUS_SUCCESS) {
      failed = "cublasGemmEx";
      break;
    }
    if (i >= warmup) {
      float f = 0;
      cudaEventRecord(e1, 0);
      if (cudaEventSynchronize(e1) != cudaSuccess || cudaEventElapsedTime(&f, e0, e1) != cudaSuccess) {
        failed = "timing";
        break;
      }
      ms[i - warmup] = f;
    }
  }
  double median = 0;
  if (!failed) {
    qsort(ms, (size_t)repeats, sizeof *ms, cmp_double);
    median = repeats % 2 ? ms[repeats / 2] : 0.5 * (ms[repeats / 2 - 1] + ms[repeats / 2]);
  }
  free(ms);
  if (e0) cudaEventDestroy(e0);
  if (e1) cudaEventDestroy(e1);
  if (h) cb.destroy(h);
  (void)cudaGetLastError();
  vsa_tensor_release(a);
  vsa_tensor_release(b);
  vsa_tensor_release(c);
  if (failed) return vsa_lua_errorf(L, "gemm_ceiling: %s failed", failed);
  lua_newtable(L);
  lua_pushnumber(L, 2.0 * n * (double)n * n / (median * 1e-3) / 1e12);
  lua_setfield(L, -2, "tflops");
  lua_pushnumber(L, median);
  lua_setfield(L, -2, "ms");
  lua_pushinteger(L, n);
  lua_setfield(L, -2, "n");
  return 1;
}

static const luaL_Reg functions[] = {{"gemm_ceiling", l_gemm_ceiling}, {NULL, NULL}};

void
vsa_lua_open_gemm(lua_State *L)
{
  luaL_register(L, NULL, functions);
}
