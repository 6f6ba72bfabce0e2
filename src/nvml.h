/* nvml.h — GPU clocks and throttle reasons through NVML, opened at run time
 * with dlopen (optional: vsalab neither links nor needs libnvidia-ml). */
#ifndef VSA_NVML_H
#define VSA_NVML_H

typedef struct {
  unsigned sm_mhz;                 /* current SM clock */
  unsigned long long reasons;      /* nvmlClocksEventReasons bit mask */
  int throttled;                   /* power, thermal or hardware slowdown */
} vsa_gpu_clocks;

/* Read the clocks of CUDA device `device`; -1 with a message when NVML or
 * the device is not available. */
int vsa_nvml_clocks(int device, vsa_gpu_clocks *out);

#endif
