#!/usr/bin/env python3
"""numpy_peer.py — an external peer that runs the block-sparse attention
backward in numpy on the CPU (float32, one q block's selected keys at a time):
the protocol's CPU test when numpy is installed (vsalab runs it as
`python3 tests/peers/numpy_peer.py DIR`; `peers=numpy` in an experiment).
Writes float32 outputs (vsalab rounds them to bf16) and host-clock timings.
Both token layouts natively: each head is a strided view of the arrays as
job.json's layout stores them (vsalab_peer.head), no transposed copy.
"""
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy as np  # noqa: E402

import vsalab_peer as vp  # noqa: E402

LOG2E = 1.4426950408889634


def backward(job, t):
    B, H, D, scale = job["B"], job["H"], job["D"], np.float32(job["sm_scale"])
    q, k, v, do, o = (vp.bf16_to_f32(t[n]) for n in ("q", "k", "v", "dO", "o"))
    lse, vbs = t["lse"], t["variable_block_sizes"]
    qi, qn = t["q2k_idx"], t["q2k_num"]
    dq, dk, dv = np.zeros_like(q), np.zeros_like(k), np.zeros_like(k)
    blk = int(job.get("block", 64))  # tokens per block
    keys = [np.arange(blk * j, blk * j + int(vbs[j])) for j in range(job["nkv"])]
    for b in range(B):
        for h in range(H):
            qh, kh, vh, doh, oh = (vp.head(job, x, b, h) for x in (q, k, v, do, o))
            dqh, dkh, dvh = (vp.head(job, x, b, h) for x in (dq, dk, dv))
            delta = (doh * oh).sum(-1)
            for i in range(job["nq"]):
                cols = [keys[j] for j in qi[b, h, i, :qn[b, h, i]]]
                if not cols:
                    continue
                cols = np.concatenate(cols)
                rows = slice(blk * i, blk * i + blk)
                Q, G, K, V = qh[rows], doh[rows], kh[cols], vh[cols]
                p = np.exp2((Q @ K.T) * (scale * np.float32(LOG2E)) - lse[b, h, rows, None])
                ds = p * ((G @ V.T) - delta[rows, None])
                dvh[cols] += p.T @ G
                dkh[cols] += scale * (ds.T @ Q)
                dqh[rows] += scale * (ds @ K)
    return dq, dk, dv


def main():
    job = vp.load_job(sys.argv[1])
    t = vp.load_inputs(job)
    dq, dk, dv = backward(job, t)
    for name, a in (("dq", dq), ("dk", dk), ("dv", dv)):
        vp.save_output(job, name, a)
    if job.get("bench"):
        def sample():
            t0 = time.perf_counter()
            backward(job, t)
            return 1e3 * (time.perf_counter() - t0)
        xs, stop = vp.bench_loop(sample, job["bench"])
        vp.save_timing(job, xs, "host", "hot", stop,
                       f"numpy float32 on the CPU, {job.get('layout', 'bhsd')} read in place")
    return 0


if __name__ == "__main__":
    sys.exit(main())
