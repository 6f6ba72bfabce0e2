"""peer_torch.py — what vsalab's torch peers (tests/gpu/peers/*_peer.py) share:

- use_peer_packages(): the pinned peer packages of .peers/ (scripts/peers.sh)
  first on sys.path, their .pth files read as site-packages' are (the
  `cutlass` package of nvidia-cutlass-dsl is found through one);
- inputs(job, dev): the point's tensors on the GPU (bf16 from their uint16
  bits), each in the layout job.json names;
- save_outputs(job, dq, dk, dv): gradients back as bf16 bits;
- cuda_time / sustained_time: vsalab's sampling rule on CUDA events (burst,
  with the stream held by a spin kernel; or back to back, unsynchronised);
- kernel_breakdown(fn): each GPU kernel's time per call, from the torch
  profiler, so a row that times the whole call as a user makes it also
  says what its kernels alone took;
- finish(...): the first call's outputs, then timing.json when asked.

The peers need torch and numpy; nothing here is part of the product.
"""
import math
import os
import site
import sys
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "peers"))
import numpy as np  # noqa: E402

import vsalab_peer as vp  # noqa: E402

PEERS_DIR = os.environ.get("VSALAB_PEERS_DIR", os.path.join(ROOT, ".peers"))
LN2 = math.log(2.0)


def use_peer_packages():
    """.peers/ ahead of the installed packages, with its .pth files."""
    if not os.path.isdir(PEERS_DIR):
        return
    before = list(sys.path)
    site.addsitedir(PEERS_DIR)
    added = [p for p in sys.path if p not in before]
    sys.path[:] = added + before


def peer_versions(*dists):
    """{distribution: version} of the pinned packages this peer loads."""
    from importlib import metadata
    out = {}
    for d in dists:
        try:
            out[d] = metadata.version(d)
        except metadata.PackageNotFoundError:
            out[d] = None
    return out


def to_torch(a, dev):
    import torch
    if a.dtype == np.uint16:  # bf16 bits
        return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16).to(dev).contiguous()
    return torch.from_numpy(a).to(dev).contiguous()


def to_numpy_bf16(t):
    import torch
    return t.contiguous().view(torch.int16).cpu().numpy().view(np.uint16)


def inputs(job, dev):
    """{name: tensor} on dev, as stored (q, k, v, o, dO in job['layout'])."""
    return {k: to_torch(v, dev) for k, v in vp.load_inputs(job).items()}


def save_outputs(job, dq, dk, dv):
    for name, x in (("dq", dq), ("dk", dk), ("dv", dv)):
        vp.save_output(job, name, to_numpy_bf16(x))


def block_map(idx_t, num_t, ncols):
    """Dense bool [B, H, rows, ncols] of the pairs a list selects."""
    import torch
    B, H, rows, w = idx_t.shape
    valid = torch.arange(w, device=idx_t.device)[None, None, None, :] < num_t[..., None]
    col = torch.where(valid, idx_t.long(), torch.full_like(idx_t, ncols).long())
    m = torch.zeros(B, H, rows, ncols + 1, dtype=torch.bool, device=idx_t.device)
    m.scatter_(-1, col, torch.ones_like(col, dtype=torch.bool))
    return m[..., :ncols]


def cuda_time(fn, opts):
    """vsalab's rule with CUDA events; a spin holds the stream when opts.hold."""
    import torch
    hold = opts.get("hold", True)
    spin = [0]

    def sample():
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        if hold and spin[0]:
            torch.cuda._sleep(spin[0])
        t0 = time.perf_counter()
        s.record()
        fn()
        e.record()
        host_s = time.perf_counter() - t0
        torch.cuda.synchronize()
        # Next sample: spin ~3x this sample's host queueing time (at ~2 GHz),
        # at least 20 us, so the start event waits for the whole call queued.
        spin[0] = int(max(2e-5, 3 * host_s) * 2e9)
        return s.elapsed_time(e)

    return vp.bench_loop(sample, opts)


def sustained_time(fn, opts, ring=32):
    """Mode 'sustained', as vsalab's bench_raw does it: calls queued back to
    back with an event pair around each and no synchronisation between them
    (at most `ring` in flight), for max_time seconds with at least
    min_samples; every call a sample. The GPU waits for the host only where
    Python queues a call slower than the GPU runs it."""
    import torch
    for _ in range(int(opts.get("warmup", 3))):
        fn()
    torch.cuda.synchronize()
    ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(ring)]
    min_n, max_n = int(opts.get("min_samples", 10)), int(opts.get("max_samples", 100000))
    max_s = float(opts.get("max_time", 3))
    xs, queued, wall0 = [], 0, time.perf_counter()
    while True:
        more = queued < max_n and not (queued >= min_n and time.perf_counter() - wall0 >= max_s)
        if not more and len(xs) == queued:
            break
        if not more or queued - len(xs) == ring:
            s, e = ev[len(xs) % ring]
            e.synchronize()
            xs.append(s.elapsed_time(e))
            continue
        s, e = ev[queued % ring]
        s.record()
        fn()
        e.record()
        queued += 1
    return xs, "max_samples" if queued >= max_n else "max_time"


def kernel_breakdown(fn, calls=5):
    """Each GPU kernel of fn, from the torch profiler over `calls` calls
    (after one unprofiled call): {"kernels": [{name, ms_per_call, launches}],
    "kernel_ms": their sum per call, "main_kernel": the longest's name,
    "main_kernel_ms"}; or {"kernels_error": why} where the profiler fails.
    The sum is GPU busy time: no launch gaps, no host work."""
    import torch
    try:
        from torch.profiler import ProfilerActivity, profile
        fn()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(calls):
                fn()
            torch.cuda.synchronize()
        rows = []
        for ev in prof.key_averages():
            us = getattr(ev, "device_time_total", None)
            if us is None:
                us = getattr(ev, "cuda_time_total", 0)
            if us and us > 0 and not ev.key.startswith("cuda"):  # kernels and copies, not runtime calls
                rows.append({"name": ev.key[:160], "ms_per_call": us / 1e3 / calls,
                             "launches": ev.count / calls})
        rows.sort(key=lambda r: -r["ms_per_call"])
        if not rows:
            return {"kernels_error": "the profiler recorded no GPU kernels"}
        return {"kernels": rows[:12], "kernel_ms": sum(r["ms_per_call"] for r in rows),
                "main_kernel": rows[0]["name"], "main_kernel_ms": rows[0]["ms_per_call"]}
    except Exception as e:  # the breakdown is a side note: never fail the row for it
        return {"kernels_error": f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"}


def bus_id(dev):
    import torch
    props = torch.cuda.get_device_properties(dev)
    return "%04x:%02x:%02x.0" % (getattr(props, "pci_domain_id", 0), getattr(props, "pci_bus_id", -1),
                                 getattr(props, "pci_device_id", 0))


def crash_if_asked():
    """VSALAB_PEER_CRASH_AT=N (tests/gpu/peers_fault_proof.sh): the peer's
    N-th call of a run kills itself (SIGKILL) mid-point, after its library
    ran on the GPU; VSALAB_PEER_CALLS names the file that counts the calls."""
    at, counter = os.environ.get("VSALAB_PEER_CRASH_AT"), os.environ.get("VSALAB_PEER_CALLS")
    if not at or not counter:
        return
    n = 1
    if os.path.isfile(counter):
        with open(counter) as f:
            n = int(f.read().strip() or 0) + 1
    with open(counter, "w") as f:
        f.write(f"{n}\n")
    if n == int(at):
        import signal
        print(f"peer: crashing on purpose at call {n}", flush=True)
        os.kill(os.getpid(), signal.SIGKILL)


def finish(job, dev, call, note, extra, parts=None):
    """Write the first call's gradients (it compiles: 0.5-3.5 s for CuTe
    DSL kernels, never timed), then, when job.json asks for timing, time
    call() with vsalab's options and write timing.json. `parts`: optional
    {name: fn} timed the same way for extra (e.g. the library call alone);
    the profiler's kernel breakdown of call() goes to extra too."""
    import torch
    dq, dk, dv = call()
    torch.cuda.synchronize()
    crash_if_asked()
    save_outputs(job, dq, dk, dv)
    del dq, dk, dv
    opts = job.get("bench")
    if not opts:
        return 0
    bus = bus_id(dev)
    nvml0 = vp.nvml_reading(bus)
    sustained = opts.get("mode") == "sustained"
    xs, stop = sustained_time(call, opts) if sustained else cuda_time(call, opts)
    nvml1 = vp.nvml_reading(bus)
    extra = dict(extra)
    for name, fn in (parts or {}).items():
        ys, _ = cuda_time(fn, dict(opts, repeats=20))
        ys.sort()
        extra[name] = ys[len(ys) // 2]
    extra.update(kernel_breakdown(call))
    extra["held"] = bool(opts.get("hold", True)) and not sustained
    extra["nvml"] = {"before": nvml0, "after": nvml1} if nvml0 and nvml1 else None
    vp.save_timing(job, xs, "cuda", "sustained" if sustained else "hot", stop, note, extra)
    return 0
