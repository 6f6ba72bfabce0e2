/* device.c — device queries (device.h). */
#include "device.h"

#include <stdio.h>
#include <string.h>

#include "check.h"

int
vsa_device_count(int *n)
{
  *n = 0;
  cudaError_t e = cudaGetDeviceCount(n);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    *n = 0;
    /* Without an NVIDIA driver the runtime says "driver version is
     * insufficient": that would send a user to upgrade a driver that is
     * not there. */
    if (e == cudaErrorInsufficientDriver || e == cudaErrorNoDevice)
      return vsa_fail("no CUDA device: no NVIDIA GPU or driver found (%s)", cudaGetErrorName(e));
    return vsa_fail("no CUDA device: %s (%s)", cudaGetErrorName(e),
                    cudaGetErrorString(e));
  }
  if (*n == 0) return vsa_fail("no CUDA device: no NVIDIA GPU or driver found");
  return 0;
}

int
vsa_device_get_info(int device, vsa_device_info *o)
{
  int n;
  VSA_TRY(vsa_device_count(&n));
  if (device < 0 || device >= n)
    return vsa_fail("device %d outside [0, %d)", device, n);
  struct cudaDeviceProp p;
  CUDA_TRY(cudaGetDeviceProperties(&p, device));
  memset(o, 0, sizeof *o);
  o->index = device;
  snprintf(o->name, sizeof o->name, "%s", p.name);
  const unsigned char *u = (const unsigned char *)p.uuid.bytes;
  snprintf(o->uuid, sizeof o->uuid,
           "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
           u[0], u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11],
           u[12], u[13], u[14], u[15]);
  o->cc_major = p.major;
  o->cc_minor = p.minor;
  o->sm_count = p.multiProcessorCount;
  o->total_mem_bytes = p.totalGlobalMem;
  o->l2_bytes = p.l2CacheSize;
  o->smem_per_block_optin = (int)p.sharedMemPerBlockOptin;
  CUDA_TRY(cudaDeviceGetAttribute(&o->sm_clock_khz, cudaDevAttrClockRate, device));
  CUDA_TRY(cudaDeviceGetAttribute(&o->mem_clock_khz, cudaDevAttrMemoryClockRate, device));
  CUDA_TRY(cudaDriverGetVersion(&o->driver_version));
  CUDA_TRY(cudaRuntimeGetVersion(&o->runtime_version));
  return 0;
}

void
vsa_runtime_version_string(char *buf, int len)
{
  int v = 0;
  (void)cudaRuntimeGetVersion(&v);
  snprintf(buf, len, "%d.%d", v / 1000, (v % 1000) / 10);
}

static cudaStream_t current_stream;

cudaStream_t
vsa_stream(void)
{
  return current_stream;
}

void
vsa_set_stream(cudaStream_t s)
{
  current_stream = s;
}
