/* device.h — what the CUDA devices are (name, capability, clocks). */
#ifndef VSA_DEVICE_H
#define VSA_DEVICE_H

#include <stddef.h>

#include <cuda_runtime_api.h>

typedef struct {
  int index;
  char name[256];
  char uuid[48];          /* "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx", as nvidia-smi -L */
  int cc_major, cc_minor;
  int sm_count;
  int driver_version;  /* e.g. 13000 for 13.0 */
  int runtime_version;
  int sm_clock_khz;    /* peak, as the driver reports it */
  int mem_clock_khz;
  size_t total_mem_bytes;
  int l2_bytes;
  int smem_per_block_optin;
} vsa_device_info;

/* Number of usable CUDA devices; -1 with a message ("no CUDA device: ...")
 * when there is none or no driver. */
int vsa_device_count(int *n);
int vsa_device_get_info(int device, vsa_device_info *out);
/* cudaRuntimeGetVersion as "13.0" (works without a GPU). */
void vsa_runtime_version_string(char *buf, int len);

/* The stream every launch from the Lua bindings goes to: the legacy default
 * stream, except while vsalab.bench_raw captures a CUDA graph (mode
 * 'graph'), when it is the capturing stream. */
cudaStream_t vsa_stream(void);
void vsa_set_stream(cudaStream_t s);

#endif
