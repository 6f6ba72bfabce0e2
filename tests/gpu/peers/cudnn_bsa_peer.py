#!/usr/bin/env python3
"""cudnn_bsa_peer.py — NVIDIA cuDNN frontend's Block-Sparse Attention backward
(`cudnn.block_sparse_attention.block_sparse_attention_backward`, CuTe DSL)
as an external vsalab backend (protocol 1, lua/vsalab/external.lua):

    python3 tests/gpu/peers/cudnn_bsa_peer.py DIR

(`peers=cudnn_bsa` in seed_sweep / wan720p). Needs torch, numpy and the
pinned packages in the git-ignored .peers/ (scripts/peers.sh; versions in
scripts/peers.lock).

What vsalab's inputs become (the library's contract, read from its api.py
and _interface.py):
- q, k, v, o, dO: as they are, layout='bhsd' or 'bshd' as job.json says;
- lse: vsalab's M (base 2, log2 of the row sum of exp(s*sm_scale)) times
  ln 2: the natural-log LSE the library reads (its kernels multiply by
  log2 e again);
- q2k_block_index / q2k_block_nums: vsalab's canonical q2k lists as they
  are ([B,H,nq,W] int32 ascending, -1 past each count; counts [B,H,nq]);
  the library builds its own bucketed kv->q CSR from them on every call;
- block_sizes: variable_block_sizes ([nkv] int32, valid tokens of each kv
  block; it masks kv columns only, as vsalab's oracle does);
- sparse_block_size: job.json's block (64 or 128); softmax_scale: sm_scale.

The row's time is the whole call as a user makes it: the LSE conversion,
the library's CSR build, its preprocess, main kernel and fp32->bf16
converters. timing.json's extra adds the library's kernels one by one
(kernel_breakdown: main_kernel_ms is its backward kernel alone). The first
call compiles the kernels (0.5-3.5 s) and is never timed. Exit 3 (a skipped
row) where the library cannot take the point: D other than 128, a GPU other
than SM90-SM110, a block size it does not run.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peer_torch as pt  # noqa: E402

vp = pt.vp


def main():
    job = vp.load_job(sys.argv[1])
    if job["device"] != "cuda":
        vp.skip("cudnn_bsa runs on CUDA tensors only")
    block, layout, D = int(job.get("block", 64)), job.get("layout", "bhsd"), int(job["D"])
    if block not in (64, 128):
        vp.skip(f"cudnn_bsa takes block sizes 64 and 128, the point has {block}")
    if D != 128:
        vp.skip(f"cudnn_bsa's backward takes head dim 128 on SM90, the point has {D}")
    pt.use_peer_packages()
    import torch
    dev = torch.device("cuda", job.get("cuda_device") or 0)
    torch.cuda.set_device(dev)
    major, minor = torch.cuda.get_device_capability(dev)
    if major not in (9, 10, 11):
        vp.skip(f"cudnn_bsa's backward runs on SM90-SM110, this GPU is {major}.{minor}")
    try:
        from cudnn.block_sparse_attention import block_sparse_attention_backward as bsa_bwd
    except ImportError as e:
        print(f"cudnn_bsa: cannot import cudnn.block_sparse_attention ({e}): run scripts/peers.sh install",
              file=sys.stderr)
        return 2
    versions = pt.peer_versions("nvidia-cudnn-frontend", "nvidia-cutlass-dsl", "apache-tvm-ffi")
    t = pt.inputs(job, dev)
    q, k, v, o, dO, lse_m = t["q"], t["k"], t["v"], t["o"], t["dO"], t["lse"]
    q2k_idx, q2k_num, vbs = t["q2k_idx"], t["q2k_num"], t["variable_block_sizes"]
    scale = float(job["sm_scale"])

    def call():
        lse = lse_m * pt.LN2  # vsalab's base-2 M -> the natural-log LSE cuDNN reads
        r = bsa_bwd(dO, q, k, v, o, lse, q2k_idx, None, vbs, q2k_num, softmax_scale=scale,
                    sparse_block_size=block, layout=layout)
        return r["dq_tensor"], r["dk_tensor"], r["dv_tensor"]

    note = (f"cuDNN frontend block-sparse backward, block {block}, {layout} "
            f"(nvidia-cudnn-frontend {versions['nvidia-cudnn-frontend']}, cutlass-dsl "
            f"{versions['nvidia-cutlass-dsl']}, torch {torch.__version__}); whole call: LSE to ln, "
            f"its k2q CSR build and kernels")
    return pt.finish(job, dev, call, note, {"versions": versions, "block": block, "layout": layout,
                                            "cudnn": torch.backends.cudnn.version()})


if __name__ == "__main__":
    sys.exit(main())
