"""vsalab_peer.py — the peer side of vsalab's external-backend protocol
(version 1; lua/vsalab/external.lua and docs/peers.md define it).

vsalab runs `CMD... DIR`; DIR holds the point's inputs as .npy files and
job.json. A peer reads them (load_job, load_inputs), computes dq/dk/dv,
writes them (save_output) and, when job["bench"] is not None, times its call
with the same rule as vsalab's bench (bench_loop) and writes timing.json
(save_timing). Exit 0 on success; 3 (skip) when it cannot take the point; on
failure print why and exit non-zero:
vsalab logs the point as failed with the last lines printed.

Only the standard library and numpy are needed here; bf16 arrays are stored as
uint16 bit patterns (numpy has no bfloat16).
"""
import json
import math
import os
import statistics
import sys
import time

import numpy as np


def load_job(dirpath):
    with open(os.path.join(dirpath, "job.json")) as f:
        job = json.load(f)
    if job.get("protocol") != 1:
        sys.exit(f"vsalab_peer: protocol {job.get('protocol')} not understood (1 expected)")
    job["dir"] = dirpath
    return job


def bf16_to_f32(a):
    """uint16 bf16 bit patterns -> float32 (exact)."""
    return (a.astype(np.uint32) << 16).view(np.float32)


def f32_to_bf16(a):
    """float32 -> uint16 bf16 bit patterns, round to nearest even, NaN kept."""
    u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)
    nan = (u & 0x7FFFFFFF) > 0x7F800000
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    r[nan] = ((u[nan] >> 16) | 0x40).astype(np.uint16)
    return r


def head(job, x, b, h):
    """Head (b, h) of a token tensor (q, k, v, o, dO or a gradient) as an
    [S, D] view, in job["layout"]: x[b, h] in 'bhsd' [B, H, S, D], x[b, :, h]
    in 'bshd' [B, S, H, D] (strided, no copy: writes go through)."""
    layout = job.get("layout", "bhsd")
    if layout == "bhsd":
        return x[b, h]
    if layout == "bshd":
        return x[b, :, h]
    sys.exit(f"vsalab_peer: layout '{layout}' is not supported (supported: bhsd, bshd)")


def load_inputs(job):
    """{name: numpy array} as stored (bf16 inputs as uint16), shapes checked."""
    out = {}
    for name, spec in job["inputs"].items():
        a = np.load(os.path.join(job["dir"], spec["file"]))
        if list(a.shape) != list(spec["shape"]):
            sys.exit(f"vsalab_peer: {spec['file']} has shape {a.shape}, job.json says {spec['shape']}")
        out[name] = a
    return out


def save_output(job, name, array):
    """dq, dk or dv: uint16 bf16 bits or float32, of the shape job.json gives."""
    spec = job["outputs"][name]
    if list(array.shape) != list(spec["shape"]):
        sys.exit(f"vsalab_peer: {name} has shape {array.shape}, expected {spec['shape']}")
    np.save(os.path.join(job["dir"], spec["file"]), array)


def bench_loop(sample, opts):
    """vsalab's sampling rule. sample() runs one timed call and returns its ms.
    Fixed `repeats`, else at least min_samples and min_time seconds of samples,
    then stop at rel. stddev <= max_noise, max_time seconds (wall) or
    max_samples. Returns (samples, stop reason)."""
    for _ in range(int(opts.get("warmup", 3))):
        sample()
    xs, total, wall0 = [], 0.0, time.perf_counter()
    repeats = opts.get("repeats")
    min_s, max_s = int(opts.get("min_samples", 10)), int(opts.get("max_samples", 100000))
    noise = float(opts.get("max_noise", 0.005))
    min_ms, max_ms = 1e3 * float(opts.get("min_time", 0.5)), 1e3 * float(opts.get("max_time", 15))
    while True:
        if repeats is not None:
            if len(xs) >= int(repeats):
                return xs, "repeats"
        else:
            rel = statistics.stdev(xs) / statistics.mean(xs) if len(xs) > 1 else math.inf
            if len(xs) >= min_s and total >= min_ms and rel <= noise:
                return xs, "noise"
            if len(xs) >= min_s and 1e3 * (time.perf_counter() - wall0) >= max_ms:
                return xs, "max_time"
            if len(xs) >= max_s:
                return xs, "max_samples"
        ms = sample()
        xs.append(ms)
        total += ms


def nvml_reading(pci_bus_id):
    """NVML's counters for the GPU at pci_bus_id ("0000:19:00.0", as
    cudaDeviceGetPCIBusId writes it), read through ctypes as vsalab's own
    src/core/nvml.c reads them: {energy_j, power_capped_ms, thermal_capped_ms,
    time_s} (cumulative counters; time_s on the monotonic clock), or None
    where libnvidia-ml.so.1 or the device is missing. A peer brackets its
    timed samples with two readings and passes them as
    save_timing(extra={"nvml": {"before": r0, "after": r1}}): vsalab then
    derives the row's capped time and mean board power (extra.watts) from the
    samples alone, not from the peer's start-up."""
    import ctypes
    try:
        nv = ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return None

    class Violation(ctypes.Structure):
        _fields_ = [("reference_ns", ctypes.c_ulonglong), ("violation_ns", ctypes.c_ulonglong)]

    d = ctypes.c_void_p()
    if nv.nvmlInit_v2() != 0 or nv.nvmlDeviceGetHandleByPciBusId_v2(pci_bus_id.encode(), ctypes.byref(d)) != 0:
        return None
    out = {"time_s": time.monotonic()}
    mj = ctypes.c_ulonglong()
    if nv.nvmlDeviceGetTotalEnergyConsumption(d, ctypes.byref(mj)) == 0:
        out["energy_j"] = mj.value / 1e3
    v = Violation()
    for key, policy in (("power_capped_ms", 0), ("thermal_capped_ms", 1)):  # NVML_PERF_POLICY_*
        if nv.nvmlDeviceGetViolationStatus(d, policy, ctypes.byref(v)) == 0:
            out[key] = v.violation_ns / 1e6
    return out


def save_timing(job, samples, clock, mode="hot", stop=None, note="", extra=None):
    with open(os.path.join(job["dir"], job.get("timing_file", "timing.json")), "w") as f:
        json.dump({"samples_ms": samples, "clock": clock, "mode": mode, "stop": stop,
                   "note": note, "extra": extra or {}}, f)


SKIP_STATUS = 3


def skip(why):
    """This peer cannot run the point (a block size, layout or GPU its
    library does not take): say why in one line and exit with status 3,
    which vsalab logs as a skipped row, not a failure."""
    print(f"skip: {why}".replace("\n", " "), flush=True)
    sys.exit(SKIP_STATUS)
