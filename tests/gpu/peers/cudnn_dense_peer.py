#!/usr/bin/env python3
"""cudnn_dense_peer.py — cuDNN's dense attention backward (PyTorch SDPA on
its cuDNN backend) as an external vsalab backend (protocol 1,
lua/vsalab/external.lua), the dense ceiling beside the block-sparse rows:

    python3 tests/gpu/peers/cudnn_dense_peer.py DIR

(`peers=cudnn_dense`, at density 1: `-a density=[1]`). Needs torch with
cuDNN (the GPU host's); nothing from .peers/.

It computes dense attention, so it takes only points where the lists
select every (q block, kv block) pair and every kv block is full
(variable_block_sizes == block): then the block-sparse backward and the
dense one are the same function, the fp64 check is the same, and TFLOPS on
selected blocks (10·block²·D a pair) is the dense count 10·S²·D a head.
Any other point exits 3 (a skipped row that says why).

The call: aten's cuDNN SDPA backward
(`torch.ops.aten._scaled_dot_product_cudnn_attention_backward`) on vsalab's
o and lse (M format times ln 2: the natural-log LSE cuDNN keeps), the
kernel a user's `o.backward()` runs after an SDPA forward on the cuDNN
backend. Where this torch's op does not take those arguments, the peer
runs that forward itself (untimed) and times `o.backward(dO)`; the row's
note says which. Layouts: both, as strided [B, H, S, D] views (cuDNN reads
BSHD strides natively; no copy).
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peer_torch as pt  # noqa: E402

vp = pt.vp


def as_bhsd(x, layout):
    """A [B, H, S, D] view of a tensor stored in `layout` (no copy)."""
    return x.transpose(1, 2) if layout == "bshd" else x


def aten_call(q, k, v, o, dO, lse, scale):
    """The cuDNN SDPA backward on vsalab's o and lse, with the bookkeeping
    tensors (philox seed and offset, sequence offsets) its own forward makes,
    exactly as autograd passes them; or (None, why) where this torch's ops
    decline. Also returns how far its forward's LSE lies from vsalab's."""
    import torch
    fwd = getattr(torch.ops.aten, "_scaled_dot_product_cudnn_attention", None)
    bwd = getattr(torch.ops.aten, "_scaled_dot_product_cudnn_attention_backward", None)
    if fwd is None or bwd is None:
        return None, "this torch has no aten cuDNN SDPA ops"
    try:
        r = fwd(q, k, v, None, True, 0.0, False, False, scale=scale)
        lse_own, cum_q, cum_k, max_q, max_k, seed, offset = r[1], r[2], r[3], r[4], r[5], r[6], r[7]
        lse_in = lse.reshape(lse_own.shape).contiguous()  # [B, H, S] or [B, H, S, 1]
        lse_gap = float((lse_own.float() - lse_in).abs().max())

        def call():
            return bwd(dO, q, k, v, o, lse_in, seed, offset, None, cum_q, cum_k, max_q, max_k, 0.0,
                       False, scale=scale)[:3]
        call()
        torch.cuda.synchronize()
    except (RuntimeError, TypeError, IndexError) as e:
        return None, f"the aten ops declined: {type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"
    return call, lse_gap


def autograd_call(q, k, v, dO, scale):
    """SDPA forward on the cuDNN backend (untimed), then o.backward(dO)."""
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel
    leaves = [x.detach().requires_grad_(True) for x in (q, k, v)]
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        o = torch.nn.functional.scaled_dot_product_attention(*leaves, scale=scale)

    def call():
        for t in leaves:
            t.grad = None
        o.backward(dO, retain_graph=True)
        return leaves[0].grad, leaves[1].grad, leaves[2].grad
    return call


def main():
    job = vp.load_job(sys.argv[1])
    if job["device"] != "cuda":
        vp.skip("cudnn_dense runs on CUDA tensors only")
    block, layout = int(job.get("block", 64)), job.get("layout", "bhsd")
    import torch
    dev = torch.device("cuda", job.get("cuda_device") or 0)
    torch.cuda.set_device(dev)
    t = pt.inputs(job, dev)
    nkv = t["variable_block_sizes"].numel()
    pairs, full = int(t["q2k_num"].clamp(0, nkv).sum()), t["q2k_num"].numel() * nkv
    if pairs != full:
        vp.skip(f"cudnn_dense computes dense attention: it takes density 1, "
                f"the point selects {pairs} of {full} pairs")
    short = int((t["variable_block_sizes"] != block).sum())
    if short:
        vp.skip(f"cudnn_dense computes dense attention: {short} of {nkv} kv blocks are not full")
    q, k, v, o, dO = (as_bhsd(t[n], layout) for n in ("q", "k", "v", "o", "dO"))
    scale = float(job["sm_scale"])
    lse = t["lse"] * pt.LN2  # vsalab's base-2 M -> the natural-log LSE cuDNN keeps
    call, info = aten_call(q, k, v, o, dO, lse, scale)
    extra = {"layout": layout, "cudnn": torch.backends.cudnn.version()}
    if call is not None:
        route = "aten cuDNN SDPA backward on vsalab's o and lse"
        extra["lse_gap"] = info  # max |its forward's LSE - vsalab's|, natural log
    else:
        print(f"cudnn_dense: {info}; timing o.backward() instead", flush=True)
        call, route = autograd_call(q, k, v, dO, scale), "o.backward() after its own cuDNN SDPA forward"
        extra["aten_declined"] = info
    extra["route"] = route

    def grads():
        dq, dk, dv = call()
        # Back in the point's layout: views where the strides allow (no copy timed).
        return tuple(as_bhsd(g, layout) for g in (dq, dk, dv))
    note = (f"cuDNN dense attention backward (torch {torch.__version__}, cuDNN "
            f"{torch.backends.cudnn.version()}), {layout}: {route}")
    return pt.finish(job, dev, grads, note, extra)


if __name__ == "__main__":
    sys.exit(main())
