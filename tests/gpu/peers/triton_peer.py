#!/usr/bin/env python3
"""triton_peer.py — FastVideo's public Triton VSA backward and inversion as an
external vsalab backend (protocol 1, lua/vsalab/external.lua): vsalab writes a
point's exact inputs into DIR and runs

    python3 tests/gpu/peers/triton_peer.py DIR

(`peers=triton` in seed_sweep / wan720p). Needs torch, triton and numpy, and
the peer files in the git-ignored .peer/fastvideo_triton/ (tests/gpu/fetch_peer.sh;
copy .peer/ to the GPU host). Never committed; vsalab reports the backend
unavailable, with the reason, when they are absent.

What runs: the peer's own inversion (idx.invert_indices) of vsalab's q2k
lists, checked to select the same pairs as vsalab's k2q lists, then
bsa.triton_block_sparse_attn_backward(dO, q, k, v, o, lse, q2k, k2q, vbs) on
vsalab's o and lse (the M format both use). The row's time is the backward
with k2q precomputed, as vsalab's own rows; the inversion's median goes to
timing.json's extra (inversion_ms). Timing follows vsalab's bench options
(warm-up, min samples, noise target, time cap): CUDA events around each call,
synchronised per sample; with hold (vsalab's default) a spin kernel
(torch.cuda._sleep) sized to the host launch time is queued first, so the
events see the kernels back to back, not Python's launch overhead. Asked
for mode 'sustained', calls are queued back to back without synchronising
(sustained_time), as vsalab's own sustained samples are. Triton's
backward fixes sm_scale = 1/sqrt(D): another scale is refused (exit 2).
NVML readings bracket the timed samples (vsalab_peer.nvml_reading), so the
row's throttling and board power describe the samples, not the start-up.
"""
import importlib
import math
import os
import sys
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "peers"))
import numpy as np  # noqa: E402
import torch  # noqa: E402

import vsalab_peer as vp  # noqa: E402

PEER_DIR = os.environ.get("VSALAB_TRITON_PEER_DIR", os.path.join(ROOT, ".peer", "fastvideo_triton"))


def load_peer():
    if not os.path.isfile(os.path.join(PEER_DIR, "block_sparse_attn_triton.py")):
        print(f"triton_peer: no peer files in {PEER_DIR}: run tests/gpu/fetch_peer.sh and copy .peer/ here",
              file=sys.stderr)
        sys.exit(2)
    sys.path.insert(0, os.path.dirname(PEER_DIR))
    pkg = os.path.basename(PEER_DIR)
    bsa = importlib.import_module(pkg + ".block_sparse_attn_triton")
    idx = importlib.import_module(pkg + ".index")
    commit = "unknown"
    if os.path.isfile(os.path.join(PEER_DIR, "COMMIT")):
        with open(os.path.join(PEER_DIR, "COMMIT")) as f:
            commit = f.readline().strip()[:12]
    return bsa, idx, commit


def to_torch(a, dev):
    if a.dtype == np.uint16:  # bf16 bits
        return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16).to(dev).contiguous()
    return torch.from_numpy(a).to(dev).contiguous()


def to_numpy_bf16(t):
    return t.contiguous().view(torch.int16).cpu().numpy().view(np.uint16)


def block_map(idx_t, num_t, ncols):
    """Dense bool [B, H, rows, ncols] of the pairs a list selects."""
    B, H, rows, w = idx_t.shape
    valid = torch.arange(w, device=idx_t.device)[None, None, None, :] < num_t[..., None]
    col = torch.where(valid, idx_t.long(), torch.full_like(idx_t, ncols).long())
    m = torch.zeros(B, H, rows, ncols + 1, dtype=torch.bool, device=idx_t.device)
    m.scatter_(-1, col, torch.ones_like(col, dtype=torch.bool))
    return m[..., :ncols]


def cuda_time(fn, opts):
    """vsalab's rule with CUDA events; a spin holds the stream when opts.hold."""
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


def main():
    job = vp.load_job(sys.argv[1])
    if job["device"] != "cuda":
        print("triton_peer: runs on CUDA tensors only", file=sys.stderr)
        return 2
    if abs(job["sm_scale"] - 1 / math.sqrt(job["D"])) > 1e-6 * job["sm_scale"]:
        print(f"triton_peer: the Triton backward fixes sm_scale = 1/sqrt(D), got {job['sm_scale']}",
              file=sys.stderr)
        return 2
    bsa, idx, commit = load_peer()
    dev = torch.device("cuda", job.get("cuda_device") or 0)
    torch.cuda.set_device(dev)
    a = vp.load_inputs(job)
    t = {k: to_torch(v, dev) for k, v in a.items()}
    del a
    q2k_idx, q2k_num, vbs, nkv = t["q2k_idx"], t["q2k_num"], t["variable_block_sizes"], job["nkv"]
    # The peer's own inversion must select vsalab's pairs.
    k2q_idx, k2q_num = idx.invert_indices(q2k_idx, q2k_num, nkv)
    torch.cuda.synchronize()
    same = torch.equal(block_map(k2q_idx, k2q_num, job["nq"]), block_map(t["k2q_idx"], t["k2q_num"], job["nq"]))
    if not same:
        print("triton_peer: the peer's inversion selects other pairs than vsalab's k2q lists", file=sys.stderr)
        return 1

    def bwd():
        return bsa.triton_block_sparse_attn_backward(t["dO"], t["q"], t["k"], t["v"], t["o"], t["lse"],
                                                     q2k_idx, q2k_num, k2q_idx, k2q_num, vbs)

    dq, dk, dv = bwd()
    torch.cuda.synchronize()
    for name, x in (("dq", dq), ("dk", dk), ("dv", dv)):
        vp.save_output(job, name, to_numpy_bf16(x))
    del dq, dk, dv
    if job.get("bench"):
        opts = job["bench"]
        props = torch.cuda.get_device_properties(dev)
        bus = "%04x:%02x:%02x.0" % (getattr(props, "pci_domain_id", 0), getattr(props, "pci_bus_id", -1),
                                   getattr(props, "pci_device_id", 0))
        nvml0 = vp.nvml_reading(bus)
        sustained = opts.get("mode") == "sustained"
        xs, stop = sustained_time(bwd, opts) if sustained else cuda_time(bwd, opts)
        nvml1 = vp.nvml_reading(bus)
        inv, _ = cuda_time(lambda: idx.invert_indices(q2k_idx, q2k_num, nkv), dict(opts, repeats=20))
        inv.sort()
        import triton
        vp.save_timing(job, xs, "cuda", "sustained" if sustained else "hot", stop,
                       f"FastVideo Triton backward {commit} (torch {torch.__version__}, triton "
                       f"{triton.__version__}), k2q from its own inversion",
                       {"inversion_ms": inv[len(inv) // 2], "peer_commit": commit,
                        "held": bool(opts.get("hold", True)) and not sustained,
                        "nvml": {"before": nvml0, "after": nvml1} if nvml0 and nvml1 else None})
    return 0


if __name__ == "__main__":
    sys.exit(main())
