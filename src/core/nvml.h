/* nvml.h — GPU clocks and throttle reasons through NVML, opened at run time
 * with dlopen (optional: vsalab neither links nor needs libnvidia-ml). */
#ifndef VSA_NVML_H
#define VSA_NVML_H

typedef struct {
  unsigned sm_mhz;                 /* current SM clock */
  unsigned long long reasons;      /* nvmlClocksEventReasons bit mask */
  int throttled;                   /* power, thermal or hardware slowdown now */
  /* Cumulative counters (since the driver loaded), each -1 where NVML or the
   * GPU lacks it: the time the clocks were held below the application
   * clocks by the power and by the thermal limit (nvmlDeviceGetViolationStatus,
   * NVML_PERF_POLICY_POWER / _THERMAL; ns), and the board's energy
   * (nvmlDeviceGetTotalEnergyConsumption, mJ). The difference of two
   * readings says whether a slowdown happened between them, which the
   * instantaneous `reasons` at either end can miss. */
  long long power_capped_ns, thermal_capped_ns, energy_mj;
} vsa_gpu_clocks;

/* Read the clocks and counters of CUDA device `device`; -1 with a message
 * when NVML or the device is not available. */
int vsa_nvml_clocks(int device, vsa_gpu_clocks *out);

#endif
