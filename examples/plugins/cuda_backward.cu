/* cuda_backward.cu — an example vsalab plug-in on the GPU: a plain CUDA
 * block-sparse attention backward (fp32 SIMT, one thread per key for dk/dv
 * and one per query for dq), against include/vsalab_plugin.h alone. It shows
 * the ABI, not a fast kernel.
 *
 * Build (CMake does it: build/libvsalab_example_cuda.so):
 *   nvcc -O2 -shared -Xcompiler -fPIC -I src examples/plugins/cuda_backward.cu -o libmine.so
 * Use (on a GPU):
 *   build/vsalab run experiments/seed_sweep.lua -a Sq=[4096] \
 *       plugin=build/libvsalab_example_cuda.so
 *
 * Exports, besides vsalab_plugin_abi:
 *   vsalab_backward        the backward (the default symbol): launches two kernels on
 *                          args->stream, allocates nothing, never
 *                          synchronises (so it declares CAPTURABLE: vsalab
 *                          holds the stream and may capture it in a graph)
 *   cuda_example_fault     writes through a bad pointer (an illegal address):
 *                          the GPU fault test (tests/gpu/run.sh plugins) checks
 *                          that the run then ends `failed` with its rows kept
 *   cuda_example_overrun   the backward, then one element written past dv and
 *                          one before dq: tests/gpu/plugin_spec.lua checks
 *                          that the guard zones fail it, naming dq
 * Pointers are device pointers on args->device (VSALAB_PLUGIN_CUDA only).
 */
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdio.h>

#include "vsalab_plugin.h"

VSALAB_PLUGIN_DEFINE(VSALAB_PLUGIN_CUDA, VSALAB_PLUGIN_CAPTURABLE)

#define MAXD 256
#define LOG2E 1.4426950408889634f

struct dims {
  int Sq, Skv, D, nq, nkv, qw, kw;
  float scale;
};

__device__ static float
ld(const __nv_bfloat16 *p)
{
  return __bfloat162float(*p);
}

/* dk, dv of key j (thread) of slice bh (blockIdx.y): every q row of the q
 * blocks in its kv block's k2q list. */
__global__ void
dkdv_kernel(dims d, const __nv_bfloat16 *q, const __nv_bfloat16 *k, const __nv_bfloat16 *v,
            const __nv_bfloat16 *o, const __nv_bfloat16 *dO, const float *lse,
            const int *k2q_idx, const int *k2q_num, const int *vbs, __nv_bfloat16 *dk,
            __nv_bfloat16 *dv)
{
  long long bh = blockIdx.y;
  int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= d.Skv) return;
  int kb = j / 64, t = j % 64;
  q += bh * d.Sq * d.D, o += bh * d.Sq * d.D, dO += bh * d.Sq * d.D, lse += bh * d.Sq;
  k += bh * d.Skv * d.D, v += bh * d.Skv * d.D;
  float ak[MAXD], av[MAXD];
  for (int x = 0; x < d.D; x++) ak[x] = av[x] = 0.f;
  int n = k2q_num[bh * d.nkv + kb];
  bool valid = t < vbs[kb];
  for (int e = 0; valid && e < n; e++) {
    int qb = k2q_idx[(bh * d.nkv + kb) * d.kw + e];
    for (int i = qb * 64; i < qb * 64 + 64; i++) {
      float s = 0, dp = 0, delta = 0;
      for (int x = 0; x < d.D; x++) {
        float qx = ld(q + (long long)i * d.D + x), gx = ld(dO + (long long)i * d.D + x);
        s += qx * ld(k + (long long)j * d.D + x);
        dp += gx * ld(v + (long long)j * d.D + x);
        delta += gx * ld(o + (long long)i * d.D + x);
      }
      float p = exp2f(s * d.scale * LOG2E - lse[i]);
      float ds = p * (dp - delta);
      for (int x = 0; x < d.D; x++) {
        av[x] += p * ld(dO + (long long)i * d.D + x);
        ak[x] += ds * ld(q + (long long)i * d.D + x);
      }
    }
  }
  long long base = (bh * d.Skv + j) * d.D;
  for (int x = 0; x < d.D; x++) {
    dk[base + x] = __float2bfloat16(ak[x] * d.scale);
    dv[base + x] = __float2bfloat16(av[x]);
  }
}

/* dq of q row i (thread) of slice bh: the valid keys of its q block's list. */
__global__ void
dq_kernel(dims d, const __nv_bfloat16 *q, const __nv_bfloat16 *k, const __nv_bfloat16 *v,
          const __nv_bfloat16 *o, const __nv_bfloat16 *dO, const float *lse,
          const int *q2k_idx, const int *q2k_num, const int *vbs, __nv_bfloat16 *dq)
{
  long long bh = blockIdx.y;
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= d.Sq) return;
  int qb = i / 64;
  q += bh * d.Sq * d.D, o += bh * d.Sq * d.D, dO += bh * d.Sq * d.D, lse += bh * d.Sq;
  k += bh * d.Skv * d.D, v += bh * d.Skv * d.D;
  float acc[MAXD];
  float delta = 0;
  for (int x = 0; x < d.D; x++) {
    acc[x] = 0.f;
    delta += ld(dO + (long long)i * d.D + x) * ld(o + (long long)i * d.D + x);
  }
  int n = q2k_num[bh * d.nq + qb];
  for (int e = 0; e < n; e++) {
    int kb = q2k_idx[(bh * d.nq + qb) * d.qw + e];
    for (int t = 0; t < vbs[kb] && t < 64; t++) {
      int j = kb * 64 + t;
      float s = 0, dp = 0;
      for (int x = 0; x < d.D; x++) {
        s += ld(q + (long long)i * d.D + x) * ld(k + (long long)j * d.D + x);
        dp += ld(dO + (long long)i * d.D + x) * ld(v + (long long)j * d.D + x);
      }
      float ds = exp2f(s * d.scale * LOG2E - lse[i]) * (dp - delta);
      for (int x = 0; x < d.D; x++) acc[x] += ds * ld(k + (long long)j * d.D + x);
    }
  }
  for (int x = 0; x < d.D; x++) dq[(bh * d.Sq + i) * d.D + x] = __float2bfloat16(acc[x] * d.scale);
}

extern "C" VSALAB_PLUGIN_EXPORT int
vsalab_backward(const vsalab_plugin_args *a, char *err, size_t err_len)
{
  if (a->device < 0 || a->D > MAXD) {
    snprintf(err, err_len, "cuda_example: needs CUDA tensors and D <= %d (device %d, D %d)", MAXD,
             a->device, a->D);
    return VSALAB_PLUGIN_E_UNSUPPORTED;
  }
  dims d = {a->Sq, a->Skv, a->D, a->nq, a->nkv, (int)a->q2k_idx.shape[3],
            (int)a->k2q_idx.shape[3], a->sm_scale};
  cudaStream_t s = (cudaStream_t)a->stream;
  typedef const __nv_bfloat16 *cb;
  dim3 gk((a->Skv + 127) / 128, a->B * a->H), gq((a->Sq + 127) / 128, a->B * a->H);
  dkdv_kernel<<<gk, 128, 0, s>>>(d, (cb)a->q.data, (cb)a->k.data, (cb)a->v.data, (cb)a->o.data,
                                 (cb)a->dO.data, (const float *)a->lse.data,
                                 (const int *)a->k2q_idx.data, (const int *)a->k2q_num.data,
                                 (const int *)a->variable_block_sizes.data,
                                 (__nv_bfloat16 *)a->dk.data, (__nv_bfloat16 *)a->dv.data);
  dq_kernel<<<gq, 128, 0, s>>>(d, (cb)a->q.data, (cb)a->k.data, (cb)a->v.data, (cb)a->o.data,
                               (cb)a->dO.data, (const float *)a->lse.data,
                               (const int *)a->q2k_idx.data, (const int *)a->q2k_num.data,
                               (const int *)a->variable_block_sizes.data,
                               (__nv_bfloat16 *)a->dq.data);
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) {
    snprintf(err, err_len, "cuda_example: launch failed: %s", cudaGetErrorString(e));
    return VSALAB_PLUGIN_E_CUDA;
  }
  return 0;
}

__global__ void
fault_kernel(int *p)
{
  *p = 1;
}

extern "C" VSALAB_PLUGIN_EXPORT int
cuda_example_fault(const vsalab_plugin_args *a, char *err, size_t err_len)
{
  fault_kernel<<<1, 1, 0, (cudaStream_t)a->stream>>>((int *)(uintptr_t)0x10);
  return 0;
}

/* One bf16 past the end of an output and one before another: an
 * off-by-one in a plug-in's bounds, which vsalab's guard zones catch. */
__global__ void
overrun_kernel(__nv_bfloat16 *dq, __nv_bfloat16 *dv, long long n)
{
  dv[n] = __float2bfloat16(0.0f);
  dq[-1] = __float2bfloat16(0.0f);
}

extern "C" VSALAB_PLUGIN_EXPORT int
cuda_example_overrun(const vsalab_plugin_args *a, char *err, size_t err_len)
{
  int rc = vsalab_backward(a, err, err_len);
  if (rc != 0) return rc;
  long long n = (long long)a->dv.shape[0] * a->dv.shape[1] * a->dv.shape[2] * a->dv.shape[3];
  overrun_kernel<<<1, 1, 0, (cudaStream_t)a->stream>>>((__nv_bfloat16 *)a->dq.data,
                                                       (__nv_bfloat16 *)a->dv.data, n);
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) {
    snprintf(err, err_len, "cuda_example: launch failed: %s", cudaGetErrorString(e));
    return VSALAB_PLUGIN_E_CUDA;
  }
  return 0;
}
