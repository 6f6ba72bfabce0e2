#!/usr/bin/env python3
"""dense_energy.py [S ...] — cuDNN's dense attention backward (PyTorch SDPA,
B1 H8 D128 bf16, causal off) timed back to back for 3 s per shape, with
NVML's energy and power-cap counters around the samples: the energy a FLOP
costs on this board when nothing is sparse, to set beside the sustained
rows of vsalab and Triton (kernels/NOTES.md "Energy per pair";
tests/gpu/run.sh energy runs it when torch imports). A measuring stick on
the GPU host only; the product never needs it. FLOPs: 10·S²·D per head (2.5× the forward's 4·S²·D), the same count
as 10·64·64·D per selected pair with every pair selected."""
import os
import sys
import time

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "peers"))
import vsalab_peer as vp  # noqa: E402


def main():
    sizes = [int(a) for a in sys.argv[1:]] or [16384, 65536]
    dev = torch.device("cuda", 0)
    p = torch.cuda.get_device_properties(dev)
    bus = "%04x:%02x:%02x.0" % (getattr(p, "pci_domain_id", 0), getattr(p, "pci_bus_id", -1), getattr(p, "pci_device_id", 0))
    H, D = 8, 128
    print("S,ms_median,tflops,watts,capped_ms,samples")
    for S in sizes:
        q, k, v = (torch.randn(1, H, S, D, device=dev, dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            o = torch.nn.functional.scaled_dot_product_attention(q, k, v)
        g = torch.randn_like(o)

        def bwd():
            for t in (q, k, v):
                t.grad = None
            o.backward(g, retain_graph=True)
        for _ in range(3):
            bwd()
        torch.cuda.synchronize()
        r0, xs, t0 = vp.nvml_reading(bus), [], time.perf_counter()
        while time.perf_counter() - t0 < 3.0:
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            bwd()
            e.record()
            torch.cuda.synchronize()
            xs.append(s.elapsed_time(e))
        r1 = vp.nvml_reading(bus)
        xs.sort()
        ms = xs[len(xs) // 2]
        tf = 10 * S * S * D * H / (ms * 1e-3) / 1e12
        w = (r1["energy_j"] - r0["energy_j"]) / (r1["time_s"] - r0["time_s"]) if r0 and r1 else float("nan")
        cap = r1["power_capped_ms"] - r0["power_capped_ms"] if r0 and r1 else float("nan")
        print(f"{S},{ms:.4f},{tf:.1f},{w:.0f},{cap:.0f},{len(xs)}", flush=True)
        del q, k, v, o, g
        torch.cuda.empty_cache()
        time.sleep(2)


if __name__ == "__main__":
    main()
