#!/usr/bin/env python3
"""fa4_peer.py — FlashAttention-4's CuTe DSL block-sparse backward
(`flash_attn.cute.interface._flash_attn_bwd` with BlockSparseTensorsTorch)
as an external vsalab backend (protocol 1, lua/vsalab/external.lua):

    python3 tests/gpu/peers/fa4_peer.py DIR

(`peers=fa4`). Needs torch, numpy and the pinned packages in the
git-ignored .peers/ (scripts/peers.sh; versions in scripts/peers.lock).

The call is FastVideo's own route to it (fastvideo-kernel
block_sparse_attn_cute_fwd.py, _CuteAttentionQ128.backward at FastVideo
2f3d4074), fed from vsalab's inputs:
- q, k, v, o, dO: FA4 takes [B, S, H, D]; a 'bhsd' point is transposed
  (.transpose(1, 2).contiguous(), as FastVideo's BHSD entry point does),
  and the gradients are handed back as views;
- lse: vsalab's M (base 2) times ln 2, the natural-log LSE FA4 reads;
- the backward's kv-major lists: the dense block map of vsalab's q2k lists
  split as FastVideo splits it: kv blocks with variable_block_sizes ==
  block are 'full' blocks, those with 0 < size < block 'mask' blocks (a
  mask_mod keeps kv columns below the size, aux_tensors=[sizes]), empty
  ones in neither; each map transposed to [B, H, nkv, nq] and turned into
  ascending index lists with counts (FastVideo's map_to_index semantics:
  -1 past each count);
- block_size=(block, block); softmax_scale = sm_scale.

FA4's backward tiles kv by 128 (SM90 and SM100), so it takes block 128
only: other blocks exit 3 (a skipped row), as do head dims other than 64
and 128 and GPUs other than SM90-SM110. The row's time is the whole call:
layout copies, LSE conversion, list build and the library call.
timing.json's extra adds library_ms (the library call alone, lists and
tensors prepared beforehand) and the kernels one by one (kernel_breakdown).
The first call compiles (0.5-3.5 s) and is never timed. A public report
(flash-attention #2623) says its SM90 block-sparse backward gave wrong
gradients: vsalab's fp64 check of every row shows whether it still does.
"""
import functools
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peer_torch as pt  # noqa: E402

vp = pt.vp


def map_to_index(m):
    """bool [B, H, R, C] -> (idx int32 [B, H, R, C]: the selected columns
    ascending, -1 past the count; cnt int32 [B, H, R])."""
    import torch
    C = m.shape[-1]
    cols = torch.arange(C, device=m.device, dtype=torch.int32).expand(m.shape)
    key = torch.where(m, cols, cols + C).sort(dim=-1).values  # selected first, in order
    idx = torch.where(key < C, key, torch.full_like(key, -1))
    return idx.contiguous(), m.sum(dim=-1, dtype=torch.int32).contiguous()


@functools.lru_cache(maxsize=4)
def vbs_mask_mod(kv_block):
    """A CuTe mask_mod keeping kv columns below each kv block's valid size
    (aux_tensors[0], int32 [nkv]): FastVideo's _build_vbs_mask_mod."""
    import cutlass
    import cutlass.cute as cute
    from flash_attn.cute import utils
    from flash_attn.cute.block_sparsity import fast_sampling

    @fast_sampling
    @cute.jit
    def mask_mod(batch, head, m_idx, n_idx, seqlen_info, aux_tensors):
        del batch, head, m_idx, seqlen_info
        blk = utils.scalar_to_ssa(kv_block, cutlass.Int32)
        zero = utils.scalar_to_ssa(0, cutlass.Int32)
        kv_blk, kv_off = n_idx // blk, n_idx % blk
        valid = utils.scalar_to_ssa(aux_tensors[0][kv_blk[0]], cutlass.Int32)
        return (valid > zero) & (kv_off < valid)

    return mask_mod


def main():
    job = vp.load_job(sys.argv[1])
    if job["device"] != "cuda":
        vp.skip("fa4 runs on CUDA tensors only")
    block, layout, D = int(job.get("block", 64)), job.get("layout", "bhsd"), int(job["D"])
    if block != 128:
        vp.skip(f"fa4's block-sparse backward tiles kv by 128: it takes block 128, the point has {block}")
    if D not in (64, 128):
        vp.skip(f"fa4 here takes head dim 64 or 128, the point has {D}")
    pt.use_peer_packages()
    import torch
    dev = torch.device("cuda", job.get("cuda_device") or 0)
    torch.cuda.set_device(dev)
    major, minor = torch.cuda.get_device_capability(dev)
    if major not in (9, 10, 11):
        vp.skip(f"fa4's block-sparse backward runs on SM90-SM110, this GPU is {major}.{minor}")
    try:
        from flash_attn.cute.block_sparsity import BlockSparseTensorsTorch
        from flash_attn.cute.interface import _flash_attn_bwd
    except ImportError as e:
        print(f"fa4: cannot import flash_attn.cute ({e}): run scripts/peers.sh install", file=sys.stderr)
        return 2
    versions = pt.peer_versions("flash-attn-4", "quack-kernels", "nvidia-cutlass-dsl", "apache-tvm-ffi")
    t = pt.inputs(job, dev)
    q2k_idx, q2k_num, vbs = t["q2k_idx"], t["q2k_num"], t["variable_block_sizes"]
    nkv, scale = int(job["nkv"]), float(job["sm_scale"])
    mask_mod = vbs_mask_mod(block)

    def bshd(x):
        return x if layout == "bshd" else x.transpose(1, 2).contiguous()

    def lists():
        bmap = pt.block_map(q2k_idx, q2k_num, nkv)  # [B, H, nq, nkv]
        full = (vbs == block).view(1, 1, 1, -1)
        partial = ((vbs > 0) & (vbs < block)).view(1, 1, 1, -1)
        full_idx, full_cnt = map_to_index((bmap & full).transpose(2, 3).contiguous())
        mask_idx, mask_cnt = map_to_index((bmap & partial).transpose(2, 3).contiguous())
        return BlockSparseTensorsTorch(mask_block_cnt=mask_cnt, mask_block_idx=mask_idx,
                                       full_block_cnt=full_cnt, full_block_idx=full_idx,
                                       block_size=(block, block))

    def library(qs, ks, vs, os_, dos, lse, sparse):
        return _flash_attn_bwd(qs, ks, vs, os_, dos, lse, softmax_scale=scale, mask_mod=mask_mod,
                               aux_tensors=[vbs], block_sparse_tensors=sparse)[:3]

    def call():
        qs, ks, vs, os_, dos = (bshd(t[n]) for n in ("q", "k", "v", "o", "dO"))
        dq, dk, dv = library(qs, ks, vs, os_, dos, t["lse"] * pt.LN2, lists())
        if layout == "bshd":
            return dq, dk, dv
        return dq.transpose(1, 2), dk.transpose(1, 2), dv.transpose(1, 2)

    prepared = [bshd(t[n]) for n in ("q", "k", "v", "o", "dO")] + [t["lse"] * pt.LN2, lists()]
    note = (f"FlashAttention-4 CuTe DSL block-sparse backward, block {block}, {layout} "
            f"(flash-attn-4 {versions['flash-attn-4']}, quack {versions['quack-kernels']}, cutlass-dsl "
            f"{versions['nvidia-cutlass-dsl']}, torch {torch.__version__}); whole call: BSHD copies, "
            f"LSE to ln, kv-major list build (FastVideo's split) and the library call")
    return pt.finish(job, dev, call, note, {"versions": versions, "block": block, "layout": layout},
                     parts={"library_ms": lambda: library(*prepared)})


if __name__ == "__main__":
    sys.exit(main())
