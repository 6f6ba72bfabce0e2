#!/usr/bin/env python3
"""triton_peer.py — time FastVideo's public Triton VSA backward and its k2q
inversion (the measuring stick of docs/ANCHORS.md) on the GPU machine,
right after vsalab's own kernels on the same GPU, and re-measure the dense
anchors (PyTorch SDPA cuDNN/FA2 backward, bf16 GEMM 8192^3).

Needs the peer files: run tests/gpu/fetch_peer.sh on the development machine
first (it fills the git-ignored .peer/fastvideo_triton/), then on the GPU
host (copy .peer/ there, and build/ to time vsalab in the same run):

    python3 tests/gpu/triton_peer.py [--shapes seed|wan|both|all|none] [--out results.csv]

(--out defaults to $OUT/triton_peer.csv.) --skip-check, --skip-anchors,
--cudnn-only, --tokens 4096,8192, --wan-vbs video, --sorted-lists, --spin,
--warmup/--iters: see --help.

  seed: B=1 H=8 D=128 25% density, 4096..65536 tokens (131072 only with 'all')
  wan:  B=1 H=40 S=92160 (1440 blocks) D=128 at 10% (top-k 144) and 25% (360)
  both (default): seed + wan;  all: seed + 131072 + wan

Inputs: bf16 q, k, v, dO ~ N(0,1) in [B,H,S,D]; q2k lists: each q block picks
top-k distinct kv blocks uniformly at random (list order random); every kv
block full (variable_block_sizes = 64) unless --wan-vbs video. o and lse come
from the peer's own Triton forward, so lse is exactly the M format the
backward reads: M = max_j(qk_j*sm_scale*log2e) + log2(l) = logsumexp_ln / ln2,
fp32 [B,H,S] (the same convention as vsalab's contract).

Timing: CUDA events, warm-up 3, median of 20, inputs reused (kernels only;
for short ops a GPU spin is queued first so that Python launch overhead is
hidden and the events see back-to-back kernels). Per shape:
  inversion  idx.invert_indices(q2k_idx, q2k_num, nkv)  (zeroed counts + 1 kernel)
  backward   bsa.triton_block_sparse_attn_backward(...)  (Delta prep + dK/dV + dQ
             kernels, with k2q precomputed)
  path       inversion + backward
TFLOPS = 10*64*64*D*pairs / time, pairs = selected (q block, kv block) pairs.

Only torch and triton are needed. Nothing here is part of the product.
"""
import argparse
import csv
import importlib
import math
import os
import statistics
import subprocess
import sys
import time

import torch

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
BLK = 64
LOG2E = 1.4426950408889634

# docs/ANCHORS.md (H200, 2026-11-29): Triton backward ms, inversion ms.
ANCHOR_BWD = {("seed", 4096): 0.190, ("seed", 8192): 0.580, ("seed", 16384): 2.10,
              ("seed", 32768): 8.20, ("seed", 65536): 33.0, ("seed", 131072): 150.0,
              ("wan", 144): 143.0, ("wan", 360): 354.0}
ANCHOR_INV = {("seed", 4096): 0.021, ("seed", 32768): 0.272, ("seed", 65536): 1.05,
              ("seed", 131072): 3.9, ("wan", 144): 3.7, ("wan", 360): 9.3}
ANCHOR_DENSE = {("cudnn", 8192): 587, ("cudnn", 32768): 545, ("flash", 8192): 296,
                ("flash", 32768): 310, ("efficient", 8192): 135, ("efficient", 32768): 138}

CSV_FIELDS = ["shape", "tokens", "heads", "density", "topk", "pairs", "inversion_ms",
              "backward_ms", "path_ms", "backward_tflops", "path_tflops",
              "backward_min_ms", "backward_max_ms", "anchor_backward_ms",
              "anchor_inversion_ms", "note"]


def log(*a):
    print(*a, flush=True)


# ---------------------------------------------------------------------------
# peer


def load_peer(peer_dir):
    peer_dir = os.path.abspath(peer_dir)
    if not os.path.isfile(os.path.join(peer_dir, "block_sparse_attn_triton.py")):
        sys.exit(f"triton_peer.py: no peer files in {peer_dir}: run tests/gpu/fetch_peer.sh "
                 "and copy .peer/ to the GPU host")
    sys.path.insert(0, os.path.dirname(peer_dir))
    pkg = os.path.basename(peer_dir)
    bsa = importlib.import_module(pkg + ".block_sparse_attn_triton")
    idx = importlib.import_module(pkg + ".index")
    commit = "unknown"
    cpath = os.path.join(peer_dir, "COMMIT")
    if os.path.isfile(cpath):
        with open(cpath) as f:
            commit = f.readline().strip()
    return bsa, idx, commit


# ---------------------------------------------------------------------------
# shapes and inputs


def shape_list(sel, tokens_override=None):
    out = []
    if sel in ("seed", "both", "all"):
        toks = [4096, 8192, 16384, 32768, 65536] + ([131072] if sel == "all" else [])
        if tokens_override:
            toks = tokens_override
        for S in toks:
            nb = S // BLK
            out.append(dict(name=f"seed_S{S}", family="seed", B=1, H=8, S=S, D=128,
                            topk=nb // 4, key=("seed", S)))
    if sel in ("wan", "both", "all"):
        for pct, topk in ((10, 144), (25, 360)):
            out.append(dict(name=f"wan720p_H40_{pct}pct", family="wan", B=1, H=40,
                            S=92160, D=128, topk=topk, key=("wan", topk)))
    return out


def video_vbs(T=21, Hh=45, W=80, t=4):
    """variable_block_sizes of a T×Hh×W latent cut into t³ tiles (vsalab's order)."""
    sizes = []
    for it in range(0, T, t):
        for ih in range(0, Hh, t):
            for iw in range(0, W, t):
                sizes.append(min(t, T - it) * min(t, Hh - ih) * min(t, W - iw))
    return sizes


def make_problem(sh, seed, vbs_mode="full", sorted_lists=False):
    dev = "cuda"
    B, H, S, D, topk = sh["B"], sh["H"], sh["S"], sh["D"], sh["topk"]
    nq = nk = S // BLK
    g = torch.Generator(device=dev)
    g.manual_seed(seed)
    q, k, v, do = (torch.randn(B, H, S, D, device=dev, dtype=torch.bfloat16, generator=g)
                   for _ in range(4))
    r = torch.rand(B, H, nq, nk, device=dev, generator=g)
    q2k_idx = r.topk(topk, dim=-1).indices.to(torch.int32)  # random kv order
    del r
    if sorted_lists:
        q2k_idx = q2k_idx.sort(dim=-1).values
    q2k_idx = q2k_idx.contiguous()
    q2k_num = torch.full((B, H, nq), topk, device=dev, dtype=torch.int32)
    if vbs_mode == "video" and sh["family"] == "wan":
        sizes = video_vbs()
        assert len(sizes) == nk, (len(sizes), nk)
        vbs = torch.tensor(sizes, device=dev, dtype=torch.int32)
    else:
        vbs = torch.full((nk,), BLK, device=dev, dtype=torch.int32)
    pairs = B * H * nq * topk
    return dict(q=q, k=k, v=v, do=do, q2k_idx=q2k_idx, q2k_num=q2k_num, vbs=vbs,
                nk=nk, pairs=pairs)


# ---------------------------------------------------------------------------
# timing

SPIN_CYCLES = 60_000_000  # ~30-60 ms at H200 clocks: lets the CPU queue all launches


def time_fn(fn, warmup=3, iters=20, spin="auto"):
    """Median/min/max ms of fn over iters, CUDA events around each call."""
    ws = []
    for _ in range(warmup):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        torch.cuda.synchronize()
        ws.append(s.elapsed_time(e))
    use_spin = spin == "on" or (spin == "auto" and (not ws or min(ws) < 10.0))
    ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
          for _ in range(iters)]
    if use_spin:
        torch.cuda._sleep(SPIN_CYCLES)
    for s, e in ev:
        s.record()
        fn()
        e.record()
    torch.cuda.synchronize()
    ts = [s.elapsed_time(e) for s, e in ev]
    return statistics.median(ts), min(ts), max(ts)


def tflops(flop, ms):
    return flop / (ms * 1e-3) / 1e12 if ms and ms > 0 else float("nan")


# ---------------------------------------------------------------------------
# correctness smoke check (dense masked fp32 autograd reference)


def rel_l2(a, b):
    a, b = a.double(), b.double()
    return ((a - b).norm() / b.norm()).item()


def block_map(q2k_idx, q2k_num, nk):
    B, H, nq, w = q2k_idx.shape
    valid = torch.arange(w, device=q2k_idx.device)[None, None, None, :] < q2k_num[..., None]
    col = torch.where(valid, q2k_idx.long(), torch.full_like(q2k_idx, nk).long())
    bm = torch.zeros(B, H, nq, nk + 1, dtype=torch.bool, device=q2k_idx.device)
    bm.scatter_(-1, col, torch.ones_like(col, dtype=torch.bool))
    return bm[..., :nk]


def dense_reference(p):
    q, k, v, do, vbs = p["q"], p["k"], p["v"], p["do"], p["vbs"]
    D = q.shape[-1]
    bm = block_map(p["q2k_idx"], p["q2k_num"], p["nk"])
    col_ok = (torch.arange(BLK, device=q.device)[None, :] < vbs[:, None]).reshape(-1)
    mask = bm.repeat_interleave(BLK, 2).repeat_interleave(BLK, 3) & col_ok
    qf, kf, vf = (t.float().requires_grad_() for t in (q, k, v))
    s = (qf @ kf.transpose(-1, -2)) * (1.0 / math.sqrt(D))
    s = s.masked_fill(~mask, float("-inf"))
    lse = torch.logsumexp(s, -1)
    o = torch.softmax(s, -1) @ vf
    o.backward(do.float())
    return dict(o=o.detach(), M=(lse * LOG2E).detach(), dq=qf.grad, dk=kf.grad, dv=vf.grad,
                bm=bm)


def check(bsa, idx, seed, tol):
    sh = shape_list("seed", [4096])[0]
    log(f"== correctness smoke check: {sh['name']} B1 H8 D128 top-k {sh['topk']} "
        f"vs dense masked fp32 torch autograd")
    prev = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    p = make_problem(sh, seed)
    ok = True
    try:
        ref = dense_reference(p)
        o, M = bsa.triton_block_sparse_attn_forward(p["q"], p["k"], p["v"], p["q2k_idx"],
                                                    p["q2k_num"], p["vbs"])
        k2q_idx, k2q_num = idx.invert_indices(p["q2k_idx"], p["q2k_num"], p["nk"])
        torch.cuda.synchronize()
        inv_ok = torch.equal(block_map(k2q_idx, k2q_num, M.shape[-1] // BLK).transpose(2, 3),
                             ref["bm"])
        fo = rel_l2(o, ref["o"])
        fm = (M - ref["M"]).abs().max().item()
        log(f"  forward:  o rel L2 {fo:.2e}   M (base-2 lse) max |diff| vs logsumexp*log2e "
            f"{fm:.2e}   inversion k2q == q2k^T: {inv_ok}")
        ok &= inv_ok and fo < tol and fm < 1e-2

        def grads(o_in, M_in):
            return bsa.triton_block_sparse_attn_backward(p["do"], p["q"], p["k"], p["v"], o_in,
                                                         M_in, p["q2k_idx"], p["q2k_num"],
                                                         k2q_idx, k2q_num, p["vbs"])

        for label, o_in, M_in, expect_ok in (
                ("Triton fwd o, M", o, M, True),
                ("torch o, lse_ln*log2e (contract)", ref["o"].to(torch.bfloat16).contiguous(),
                 ref["M"].contiguous(), True),
                ("torch o, natural-log lse (wrong on purpose)",
                 ref["o"].to(torch.bfloat16).contiguous(), (ref["M"] / LOG2E).contiguous(),
                 False)):
            dq, dk, dv = grads(o_in, M_in)
            e = [rel_l2(dq, ref["dq"]), rel_l2(dk, ref["dk"]), rel_l2(dv, ref["dv"])]
            good = max(e) < tol
            verdict = ("ok" if good else "FAIL") if expect_ok else (
                "differs, as it should" if not good else "UNEXPECTEDLY CLOSE")
            log(f"  backward with {label}: rel L2 dq {e[0]:.2e} dk {e[1]:.2e} dv {e[2]:.2e}"
                f" (dtype {dq.dtype})  {verdict}")
            ok &= good if expect_ok else not good
    finally:
        torch.backends.cuda.matmul.allow_tf32 = prev
        del p
        torch.cuda.empty_cache()
    log(f"  check {'PASSED' if ok else 'FAILED'} (tol rel L2 < {tol})")
    return ok


# ---------------------------------------------------------------------------
# peer timing


def time_shape(bsa, idx, sh, args):
    t0 = time.time()
    p = make_problem(sh, args.seed + sh["S"] + sh["topk"], args.wan_vbs, args.sorted_lists)
    q, k, v, do = p["q"], p["k"], p["v"], p["do"]
    qi, qn, vbs, nk = p["q2k_idx"], p["q2k_num"], p["vbs"], p["nk"]
    o, M = bsa.triton_block_sparse_attn_forward(q, k, v, qi, qn, vbs)
    k2q_idx, k2q_num = idx.invert_indices(qi, qn, nk)
    torch.cuda.synchronize()
    assert int(k2q_num.sum().item()) == p["pairs"], "inversion lost pairs"

    def inv():
        return idx.invert_indices(qi, qn, nk)

    def bwd():
        return bsa.triton_block_sparse_attn_backward(do, q, k, v, o, M, qi, qn, k2q_idx,
                                                     k2q_num, vbs)

    def path():
        ki, kn = idx.invert_indices(qi, qn, nk)
        return bsa.triton_block_sparse_attn_backward(do, q, k, v, o, M, qi, qn, ki, kn, vbs)

    w, n = args.warmup, args.iters
    t_inv = time_fn(inv, w, n, args.spin)
    t_bwd = time_fn(bwd, w, n, args.spin)
    t_path = time_fn(path, w, n, args.spin)
    flop = 10 * BLK * BLK * sh["D"] * p["pairs"]
    row = dict(shape=sh["name"], tokens=sh["S"], heads=sh["H"],
               density=round(sh["topk"] / nk, 4), topk=sh["topk"], pairs=p["pairs"],
               inversion_ms=t_inv[0], backward_ms=t_bwd[0], path_ms=t_path[0],
               backward_tflops=tflops(flop, t_bwd[0]), path_tflops=tflops(flop, t_path[0]),
               backward_min_ms=t_bwd[1], backward_max_ms=t_bwd[2],
               anchor_backward_ms=ANCHOR_BWD.get(sh["key"], ""),
               anchor_inversion_ms=ANCHOR_INV.get(sh["key"], ""),
               note=f"triton peer; vbs={args.wan_vbs if sh['family'] == 'wan' else 'full'}"
                    f"{'; sorted lists' if args.sorted_lists else ''}; {time.time() - t0:.0f}s")
    del p, q, k, v, do, o, M, k2q_idx, k2q_num, qi, qn, vbs
    torch.cuda.empty_cache()
    return row


# ---------------------------------------------------------------------------
# dense anchors


def dense_anchors(args):
    import torch.nn.functional as F
    rows = []
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except Exception as e:  # pragma: no cover
        log(f"  SDPA backends unavailable: {e}")
        return rows
    backends = [("cudnn", SDPBackend.CUDNN_ATTENTION)]
    if not args.cudnn_only:
        backends += [("flash", SDPBackend.FLASH_ATTENTION),
                     ("efficient", SDPBackend.EFFICIENT_ATTENTION)]
    B, H, D = 1, 8, 128
    for S in (8192, 32768):
        g = torch.Generator(device="cuda")
        g.manual_seed(args.seed + 7 * S)
        q, k, v, do = (torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16,
                                   generator=g) for _ in range(4))
        for name, be in backends:
            try:
                qq, kk, vv = (t.clone().requires_grad_() for t in (q, k, v))
                with sdpa_kernel([be]):
                    o = F.scaled_dot_product_attention(qq, kk, vv)
                    fn = lambda: torch.autograd.grad(o, (qq, kk, vv), do, retain_graph=True)
                    t = time_fn(fn, args.warmup, args.iters, args.spin)
                rows.append(dict(shape=f"dense_sdpa_{name}_bwd", tokens=S, heads=H, density=1.0,
                                 topk="", pairs="", inversion_ms="", backward_ms=t[0],
                                 path_ms="", backward_tflops=tflops(10 * S * S * D * B * H, t[0]),
                                 path_tflops="", backward_min_ms=t[1], backward_max_ms=t[2],
                                 anchor_backward_ms="", anchor_inversion_ms="",
                                 note=f"dense SDPA backward ({name}); TFLOPS=10*S^2*D*B*H/t; "
                                      f"anchor {ANCHOR_DENSE.get((name, S), '?')} TFLOPS"))
                del qq, kk, vv, o, fn
            except Exception as e:
                log(f"  SDPA {name} S{S}: {type(e).__name__}: {str(e).splitlines()[0][:200]}")
        del q, k, v, do
        torch.cuda.empty_cache()
    n = 8192
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    c = torch.empty(n, n, device="cuda", dtype=torch.bfloat16)
    t = time_fn(lambda: torch.matmul(a, b, out=c), args.warmup, args.iters, args.spin)
    rows.append(dict(shape="gemm_bf16_8192", tokens=n, heads="", density="", topk="", pairs="",
                     inversion_ms="", backward_ms=t[0], path_ms="",
                     backward_tflops=tflops(2 * n ** 3, t[0]), path_tflops="",
                     backward_min_ms=t[1], backward_max_ms=t[2], anchor_backward_ms="",
                     anchor_inversion_ms="",
                     note="torch.matmul bf16 8192^3 (ms in backward_ms); anchor 685 TFLOPS"))
    del a, b, c
    torch.cuda.empty_cache()
    return rows


# ---------------------------------------------------------------------------


def fmt(x, spec):
    return format(x, spec) if isinstance(x, (int, float)) else str(x)


def print_table(rows):
    hdr = (f"{'shape':<26} {'tokens':>7} {'H':>3} {'dens':>5} {'topk':>5} {'pairs':>10} "
           f"{'inv ms':>8} {'bwd ms':>9} {'path ms':>9} {'bwd TF':>7} {'path TF':>7} "
           f"{'anchor bwd':>10} {'x anchor':>8}")
    log(hdr)
    log("-" * len(hdr))
    for r in rows:
        ratio = ""
        if isinstance(r["anchor_backward_ms"], float) and isinstance(r["backward_ms"], float):
            ratio = f"{r['anchor_backward_ms'] / r['backward_ms']:.2f}"
        log(f"{r['shape']:<26} {fmt(r['tokens'], '>7')} {fmt(r['heads'], '>3')} "
            f"{fmt(r['density'], '>5.3f') if r['density'] != '' else '':>5} {fmt(r['topk'], '>5')} "
            f"{fmt(r['pairs'], '>10')} {fmt(r['inversion_ms'], '>8.3f'):>8} "
            f"{fmt(r['backward_ms'], '>9.3f'):>9} {fmt(r['path_ms'], '>9.3f'):>9} "
            f"{fmt(r['backward_tflops'], '>7.1f'):>7} {fmt(r['path_tflops'], '>7.1f'):>7} "
            f"{fmt(r['anchor_backward_ms'], '>10'):>10} {ratio:>8}")
    log("(x anchor = ANCHORS.md Triton ms / this run's ms: >1 means faster than the anchor run)")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shapes", choices=["seed", "wan", "both", "all", "none"], default="both")
    ap.add_argument("--tokens", default="", help="comma list overriding the seed token counts")
    ap.add_argument("--out", default=os.path.join(os.environ.get("OUT", "."), "triton_peer.csv"))
    ap.add_argument("--peer-dir", default=os.path.join(ROOT, ".peer", "fastvideo_triton"))
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--spin", choices=["auto", "on", "off"], default="auto",
                    help="queue a GPU spin before the timed calls (auto: when a call < 10 ms)")
    ap.add_argument("--wan-vbs", choices=["full", "video"], default="full",
                    help="Wan shapes: all kv blocks full (64) or 21x45x80 latent 4x4x4 tiles")
    ap.add_argument("--sorted-lists", action="store_true", help="sort each q2k list ascending")
    ap.add_argument("--skip-check", action="store_true")
    ap.add_argument("--skip-anchors", action="store_true", help="skip SDPA and GEMM anchors")
    ap.add_argument("--cudnn-only", action="store_true", help="SDPA anchors: cuDNN backend only")
    ap.add_argument("--tol", type=float, default=3e-2)
    args = ap.parse_args()

    t_start = time.time()
    bsa, idx, commit = load_peer(args.peer_dir)
    import triton
    log(f"triton_peer.py: FastVideo peer {commit}")
    log(f"  torch {torch.__version__}  triton {triton.__version__}  "
        f"GPU {torch.cuda.get_device_name(0)}")
    try:
        smi = subprocess.run(["nvidia-smi", "--query-gpu=clocks.sm,clocks.max.sm,temperature.gpu,"
                              "utilization.gpu,memory.used", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20)
        log(f"  nvidia-smi (sm MHz, max MHz, temp, util, mem): {smi.stdout.strip()}")
    except Exception:
        pass

    ok = True
    if not args.skip_check:
        ok = check(bsa, idx, args.seed, args.tol)

    toks = [int(x) for x in args.tokens.split(",") if x.strip()] or None
    rows = []
    shapes = [] if args.shapes == "none" else shape_list(args.shapes, toks)
    for sh in shapes:
        log(f"== {sh['name']}: B{sh['B']} H{sh['H']} S{sh['S']} D{sh['D']} top-k {sh['topk']}")
        try:
            r = time_shape(bsa, idx, sh, args)
            log(f"  inversion {r['inversion_ms']:.3f} ms  backward {r['backward_ms']:.3f} ms "
                f"({r['backward_tflops']:.1f} TFLOPS)  path {r['path_ms']:.3f} ms  [{r['note']}]")
            rows.append(r)
        except Exception as e:
            log(f"  FAILED: {type(e).__name__}: {e}")
            ok = False
            torch.cuda.empty_cache()
    if not args.skip_anchors:
        log("== dense anchors (SDPA backward B1 H8 D128, bf16 GEMM 8192^3)")
        rows += dense_anchors(args)

    log("")
    print_table(rows)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=CSV_FIELDS)
        w.writeheader()
        for r in rows:
            w.writerow({k: (f"{v:.5g}" if isinstance(v, float) else v) for k, v in r.items()})
    log(f"wrote {args.out}; total {time.time() - t_start:.0f} s; "
        f"{'all good' if ok else 'SOMETHING FAILED (see above)'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
