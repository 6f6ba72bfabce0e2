/* nvml.c — the few NVML calls vsalab uses, resolved with dlopen/dlsym so the
 * binary runs where libnvidia-ml.so.1 is absent (nvml.h). The CUDA device is
 * matched to its NVML handle by PCI bus id, so CUDA_VISIBLE_DEVICES
 * renumbering does not confuse the two. */
#include "nvml.h"

#include <dlfcn.h>
#include <stdio.h>

#include "check.h"

/* From NVML's public API (types are int/pointers: ABI-stable). */
typedef void *nvml_device;
#define NVML_CLOCK_SM 1
/* Slowdowns that lower clocks under load: SW power cap, HW slowdown, SW
 * thermal, HW thermal, HW power brake. */
#define NVML_SLOWDOWN_MASK (0x4ull | 0x8ull | 0x20ull | 0x40ull | 0x80ull)
#define NVML_PERF_POLICY_POWER 0
#define NVML_PERF_POLICY_THERMAL 1
typedef struct {
  unsigned long long reference_us; /* CPU timestamp */
  unsigned long long violation_ns; /* cumulative time held below application clocks */
} nvml_violation_time;

static struct {
  int state; /* 0 untried, 1 ready, -1 unavailable */
  int (*device_by_pci)(const char *, nvml_device *);
  int (*clock_info)(nvml_device, int, unsigned *);
  int (*reasons)(nvml_device, unsigned long long *);
  int (*violation)(nvml_device, int, nvml_violation_time *);
  int (*energy)(nvml_device, unsigned long long *);
} nv;

static int
nvml_load(void)
{
  if (nv.state) return nv.state;
  nv.state = -1;
  void *h = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!h) return -1;
  int (*init)(void) = (int (*)(void))dlsym(h, "nvmlInit_v2");
  nv.device_by_pci = (int (*)(const char *, nvml_device *))dlsym(h, "nvmlDeviceGetHandleByPciBusId_v2");
  nv.clock_info = (int (*)(nvml_device, int, unsigned *))dlsym(h, "nvmlDeviceGetClockInfo");
  nv.reasons = (int (*)(nvml_device, unsigned long long *))dlsym(h, "nvmlDeviceGetCurrentClocksEventReasons");
  if (!nv.reasons)
    nv.reasons = (int (*)(nvml_device, unsigned long long *))dlsym(h, "nvmlDeviceGetCurrentClocksThrottleReasons");
  nv.violation = (int (*)(nvml_device, int, nvml_violation_time *))dlsym(h, "nvmlDeviceGetViolationStatus");
  nv.energy = (int (*)(nvml_device, unsigned long long *))dlsym(h, "nvmlDeviceGetTotalEnergyConsumption");
  if (!init || !nv.device_by_pci || !nv.clock_info || init() != 0) return -1;
  nv.state = 1;
  return 1;
}

int
vsa_nvml_clocks(int device, vsa_gpu_clocks *out)
{
  if (nvml_load() < 0) return vsa_fail("nvml: libnvidia-ml.so.1 not available");
  char bus[64];
  cudaError_t e = cudaDeviceGetPCIBusId(bus, sizeof bus, device);
  if (e != cudaSuccess) return vsa_fail_cuda(e, "cudaDeviceGetPCIBusId", __FILE__, __LINE__);
  nvml_device d;
  if (nv.device_by_pci(bus, &d) != 0) return vsa_fail("nvml: no device at PCI %s", bus);
  if (nv.clock_info(d, NVML_CLOCK_SM, &out->sm_mhz) != 0)
    return vsa_fail("nvml: cannot read the SM clock of %s", bus);
  out->reasons = 0;
  if (nv.reasons) nv.reasons(d, &out->reasons);
  out->throttled = (out->reasons & NVML_SLOWDOWN_MASK) != 0;
  nvml_violation_time v;
  out->power_capped_ns = out->thermal_capped_ns = out->energy_mj = -1;
  if (nv.violation && nv.violation(d, NVML_PERF_POLICY_POWER, &v) == 0)
    out->power_capped_ns = (long long)v.violation_ns;
  if (nv.violation && nv.violation(d, NVML_PERF_POLICY_THERMAL, &v) == 0)
    out->thermal_capped_ns = (long long)v.violation_ns;
  unsigned long long mj;
  if (nv.energy && nv.energy(d, &mj) == 0) out->energy_mj = (long long)mj;
  return 0;
}
