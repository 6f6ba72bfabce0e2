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
timing.json's extra (inversion_ms).

Block 128: the Triton kernels take 64-token lists, so 128-token lists are
expanded as FastVideo's VSA-128 Triton route does it (fastvideo-kernel
block_sparse_attn_256.py, _expand_mask_and_sizes_128_to_64 and
_triton_via_route_a_128): the block map repeated 2x along q and kv, each
kv block's size split into two 64-token halves (clamp(size - {0, 64}, 0,
64)), and the q2k lists rebuilt by its map_to_index. The expansion's time
goes to extra (expand_ms). A 'bshd' point is transposed to [B, H, S, D]
inside the timed call, as FastVideo's BSHD entry point does.

Timing follows vsalab's bench options (peer_torch.cuda_time, or
sustained_time for mode 'sustained'). Triton's backward fixes sm_scale =
1/sqrt(D): another scale is refused (exit 2). NVML readings bracket the
timed samples (vsalab_peer.nvml_reading), so the row's throttling and board
power describe the samples, not the start-up.
"""
import importlib
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peer_torch as pt  # noqa: E402

vp = pt.vp
PEER_DIR = os.environ.get("VSALAB_TRITON_PEER_DIR", os.path.join(pt.ROOT, ".peer", "fastvideo_triton"))
TRITON_BLOCK = 64


def load_peer():
    if not os.path.isfile(os.path.join(PEER_DIR, "block_sparse_attn_triton.py")):
        print(f"triton_peer: no peer files in {PEER_DIR}: run tests/gpu/fetch_peer.sh and copy .peer/ "
              "to the GPU host", file=sys.stderr)
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


def expand_to_64(idx, bmap, vbs, block):
    """FastVideo's VSA-128 -> 64 expansion: (q2k_idx, q2k_num, sizes) of
    64-token blocks from a [B, H, nq, nkv] map of `block`-token blocks."""
    import torch
    f = block // TRITON_BLOCK
    m = bmap.repeat_interleave(f, dim=2).repeat_interleave(f, dim=3)
    offsets = torch.arange(f, device=vbs.device, dtype=torch.int32) * TRITON_BLOCK
    sizes = torch.clamp(vbs.to(torch.int32)[:, None] - offsets[None, :], min=0, max=TRITON_BLOCK).reshape(-1)
    qi, qn = idx.map_to_index(m.contiguous())
    return qi, qn, sizes.contiguous()


def main():
    job = vp.load_job(sys.argv[1])
    if job["device"] != "cuda":
        vp.skip("triton runs on CUDA tensors only")
    block, layout = int(job.get("block", 64)), job.get("layout", "bhsd")
    if block % TRITON_BLOCK:
        vp.skip(f"triton takes block sizes that are multiples of 64, the point has {block}")
    if abs(job["sm_scale"] - 1 / math.sqrt(job["D"])) > 1e-6 * job["sm_scale"]:
        print(f"triton_peer: the Triton backward fixes sm_scale = 1/sqrt(D), got {job['sm_scale']}",
              file=sys.stderr)
        return 2
    bsa, idx, commit = load_peer()
    import torch
    dev = torch.device("cuda", job.get("cuda_device") or 0)
    torch.cuda.set_device(dev)
    t = pt.inputs(job, dev)
    q2k_idx, q2k_num, vbs = t["q2k_idx"], t["q2k_num"], t["variable_block_sizes"]
    nq, nkv = job["nq"], job["nkv"]
    vs_map = pt.block_map(t["k2q_idx"], t["k2q_num"], nq)  # vsalab's pairs, [B, H, nkv, nq]
    extra = {"peer_commit": commit, "block": block, "layout": layout}
    parts = {}
    if block != TRITON_BLOCK:
        f = block // TRITON_BLOCK
        bmap = pt.block_map(q2k_idx, q2k_num, nkv)

        def expand():
            return expand_to_64(idx, bmap, vbs, block)

        q2k_idx, q2k_num, vbs = expand()
        nq, nkv = nq * f, nkv * f
        vs_map = vs_map.repeat_interleave(f, dim=2).repeat_interleave(f, dim=3)
        parts["expand_ms"] = expand
    # The peer's own inversion must select vsalab's pairs.
    k2q_idx, k2q_num = idx.invert_indices(q2k_idx, q2k_num, nkv)
    torch.cuda.synchronize()
    if not torch.equal(pt.block_map(k2q_idx, k2q_num, nq), vs_map):
        print("triton_peer: the peer's inversion selects other pairs than vsalab's k2q lists", file=sys.stderr)
        return 1
    parts["inversion_ms"] = lambda: idx.invert_indices(q2k_idx, q2k_num, nkv)

    def bhsd(x):
        return x.transpose(1, 2).contiguous() if layout == "bshd" else x

    def call():
        dq, dk, dv = bsa.triton_block_sparse_attn_backward(
            *(bhsd(t[n]) for n in ("dO", "q", "k", "v", "o")), t["lse"],
            q2k_idx, q2k_num, k2q_idx, k2q_num, vbs)
        if layout == "bshd":
            return dq.transpose(1, 2), dk.transpose(1, 2), dv.transpose(1, 2)
        return dq, dk, dv

    import triton
    note = (f"FastVideo Triton backward {commit} (torch {torch.__version__}, triton {triton.__version__}), "
            f"k2q from its own inversion" + (f"; {block}-token lists expanded to 64 as FastVideo does"
                                              if block != TRITON_BLOCK else "")
            + ("; bshd transposed to BHSD and back inside the timed call (the kernel takes BHSD)"
               if layout == "bshd" else ""))
    return pt.finish(job, dev, call, note, extra, parts=parts)


if __name__ == "__main__":
    sys.exit(main())
