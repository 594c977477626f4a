"""attnbench's YOSO against the YOSO authors' own CUDA kernels (their `yoso_v2` folder,
which the user provides; attnbench ships none of it), on one GPU.

    python benchmarks/authors_yoso.py --authors PATH/TO/yoso_v2 [--csv out.csv]

Their four extensions are built with torch.utils.cpp_extension.load (`--build-only` just
builds them, in parallel). Two checks come first, on the same inputs: their forward
cumulation given our hash codes equals ours, and their fast hash given our random diagonals
gives our codes (the count of codes that differ is printed). Then both attentions are timed
with attnbench's timer (CUDA events, L2 flushed before each call), alternating ours and
theirs over several rounds so drift hits both: the forward (fast hash, m hashes of tau bits,
output l2-normalised) and forward + backward. Their backward weighs each pair colliding in
any hash by the derivative of its expected collision (eq. 3); ours is timed with
backward=star (eq. 3 per collision) and with the default backward=proj; the forward also
with resample=fixed, which draws no hashes on the host inside the call.
Their kernels need fp32, d and d_v multiples of 32, n a multiple of 128, tau >= 7, and their
backward's count sort keeps 2^tau + 2n ints in 48 KiB of shared memory (n <= 5888 at tau 8).
"""

from __future__ import annotations

import csv
import math
import os
import statistics
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import torch
import torch.nn.functional as F
import typer

from attnbench import get_backend
from attnbench.kernels.lsh import dispatch
from attnbench.measure.timing import time_call

EXTENSIONS = {
    "fast_hadamard_transform": "fast_hadamard_transform",
    "lsh_cumulation": "lsh_cumulation",
    "count_sort": "weighted_lsh_cumulation/count_sort",
    "weighted_lsh_cumulation": "weighted_lsh_cumulation",
}
SOURCES = ("cuda_kernel.cu", "cuda_launch.cu", "torch_extension.cpp")


def build(authors: str, name: str):
    """Build (or load, when unchanged) one of their extensions in its own folder."""
    from torch.utils.cpp_extension import load

    folder = Path(authors) / EXTENSIONS[name]
    build_dir = Path(os.environ.get("AUTHORS_BUILD", "/tmp/authors-yoso-build")) / name
    build_dir.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("TORCH_CUDA_ARCH_LIST", "9.0")
    sources = [str(folder / s) for s in SOURCES]
    return load(f"authors_{name}", sources, build_directory=str(build_dir), verbose=False)


def built(authors: str, name: str) -> str:
    """`build` in a worker process, which hands back the name (a module does not pickle)."""
    build(authors, name)
    return name


class Authors:
    """Their YOSO as their autograd Function does it, on [G, n, d] fp32 tensors."""

    def __init__(self, authors: str, m: int, tau: int):
        self.ext = {name: build(authors, name) for name in EXTENSIONS}
        self.m, self.tau = m, tau

    def diagonals(self, groups: int, d: int, device) -> torch.Tensor:
        parts = math.ceil(self.m / (d // self.tau))
        shape = (groups, 3, parts, d)
        return 2 * torch.randint(2, shape, dtype=torch.int32, device=device) - 1

    def codes(self, x, diags, mask):
        return self.ext["fast_hadamard_transform"].fast_hash(mask, x, diags, self.m, self.tau)

    def cumulation(self, q_codes, k_codes, v, q_mask, k_mask):
        return self.ext["lsh_cumulation"].lsh_cumulation_query(
            q_mask, q_codes, k_mask, k_codes, v, 2**self.tau
        )

    def attention(self, q, k, v):
        """l2(YOSO(Q, K, V)) with their backward; Q and K normalised when training."""
        if torch.is_grad_enabled() and q.requires_grad:
            q, k = F.normalize(q, dim=-1), F.normalize(k, dim=-1)
        return F.normalize(AuthorsYOSO.apply(q, k, v, self), dim=-1)


class AuthorsYOSO(torch.autograd.Function):
    """Their autograd Function: fast hash, cumulation, and their eq. (3) backward."""

    @staticmethod
    def forward(ctx, q, k, v, authors: Authors):
        mask = torch.ones(q.shape[:2], dtype=torch.int32, device=q.device)
        diags = authors.diagonals(q.shape[0], q.shape[2], q.device)
        qc, kc = authors.codes(q, diags, mask), authors.codes(k, diags, mask)
        ctx.save_for_backward(mask, qc, kc, q, k, v)
        ctx.authors = authors
        return authors.cumulation(qc, kc, v, mask, mask)

    @staticmethod
    def backward(ctx, grad):
        mask, qc, kc, q, k, v = ctx.saved_tensors
        grad = grad.contiguous()
        authors = ctx.authors
        tau, ext = authors.tau, authors.ext
        dv = authors.cumulation(kc, qc, grad, mask, mask)
        info, idx = ext["count_sort"].count_sort(mask, kc.transpose(-1, -2).contiguous(), 2**tau)
        weighted = ext["weighted_lsh_cumulation"]
        dq = weighted.weighted_lsh_cumulation_sorted_key(
            mask, qc, info, idx, grad, v, q, k, k, min(1024, k.shape[1]), tau
        )
        dk = weighted.weighted_lsh_cumulation_sorted_query(
            info, idx, mask, qc, v, grad, k, q, q, min(1024, q.shape[1]), tau
        )
        return dq, dk, dv, None


def checks(authors: Authors, n: int, groups: int, d: int) -> None:
    """Their cumulation on our codes equals ours; their hash on our diagonals gives ours."""
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(groups, n, d, generator=gen).cuda() for _ in range(3))
    mask = torch.ones(groups, n, dtype=torch.int32, device="cuda")
    ours = get_backend(f"yoso:m={authors.m},tau={authors.tau},hash=fast")
    diags = ours.draws(groups, d, authors.tau, q.device)  # [G, P, 3, d]
    qc, kc = (dispatch.hash_codes(x, diags, "fast", authors.tau, authors.m) for x in (q, k))
    theirs = authors.cumulation(qc, kc, v, mask, mask)
    err = (theirs - dispatch.cumulation(qc, kc, v, authors.tau)).abs().max().item()
    print(f"check: cumulation on the same codes, max |theirs - ours| = {err:.3g}")
    their_codes = authors.codes(q, diags.transpose(1, 2).int().contiguous(), mask)
    differ = (their_codes != qc).sum().item()
    print(f"check: fast hash on the same diagonals, {differ} of {qc.numel()} codes differ")
    if err > 1e-4:
        raise SystemExit("their cumulation disagrees with ours on the same codes")


def timed(fn, rounds: int) -> list[float]:
    return [
        time_call(fn, "cuda", repeats=10, warmup=3, min_time_s=0.1).median for _ in range(rounds)
    ]


def compare(authors: Authors, n: int, heads: int, d: int, backward: bool, rounds: int):
    gen = torch.Generator().manual_seed(1)
    leaves = [torch.randn(1, heads, n, d, generator=gen).cuda() for _ in range(3)]
    grad = torch.randn(1, heads, n, d, device="cuda")
    flat = [t.reshape(heads, n, d).contiguous() for t in leaves]
    base = f"yoso:m={authors.m},tau={authors.tau},hash=fast"
    specs = [base, base + ",resample=fixed"]  # fixed: no hash draws made on the host
    if backward:
        specs = [base + ",backward=proj", base + ",backward=star"]
        leaves = [t.requires_grad_() for t in leaves]
        flat = [t.requires_grad_() for t in flat]
    shaped = {"authors": (lambda: authors.attention(*flat), grad.reshape(heads, n, d))}
    for spec in specs:
        backend = get_backend(spec)
        shaped[spec] = (lambda b=backend: b(*leaves), grad)
    if backward:
        calls = {name: (lambda f=f, g=g: f().backward(g)) for name, (f, g) in shaped.items()}
    else:
        calls = {name: f for name, (f, _) in shaped.items()}
    medians = {name: [] for name in calls}
    for r in range(rounds):  # alternate the order, so drift within a round hits both
        for name in list(calls) if r % 2 == 0 else reversed(list(calls)):
            with torch.set_grad_enabled(backward):
                timing = time_call(calls[name], "cuda", repeats=10, warmup=3, min_time_s=0.1)
            medians[name].append(timing.median)
    return {name: statistics.median(ms) for name, ms in medians.items()}


def main(
    authors: str = typer.Option(..., help="the authors' yoso_v2 folder"),
    build_only: bool = False,
    m: int = 32,
    tau: int = 8,
    heads: int = 4,
    dim: int = 64,
    rounds: int = 3,
    csv_path: str = typer.Option("", "--csv"),
) -> None:
    if not (Path(authors) / "lsh_cumulation").is_dir():
        raise typer.BadParameter(f"{authors} is not the authors' yoso_v2 folder")
    if build_only:
        with ProcessPoolExecutor(len(EXTENSIONS)) as pool:
            for name in pool.map(built, [authors] * len(EXTENSIONS), EXTENSIONS):
                print("built", name)
        return
    theirs = Authors(authors, m, tau)
    checks(theirs, 4096, heads, dim)
    rows = []
    cases = [(4096, False), (16384, False), (65536, False), (1024, True), (4096, True)]
    for n, backward in cases:
        times = compare(theirs, n, heads, dim, backward, rounds)
        for name, ms in times.items():
            ratio = ms / times["authors"]
            mode = "fwdbwd" if backward else "fwd"
            rows.append({"n": n, "mode": mode, "impl": name, "ms": ms, "vs_authors": ratio})
            print(f"n={n:6d} {mode:6s} {name:42s} {ms:9.3f} ms  {ratio:5.2f}x the authors' time")
    if csv_path:
        with open(csv_path, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)


if __name__ == "__main__":
    typer.run(main)
