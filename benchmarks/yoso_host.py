"""Where the host time of small YOSO calls on a GPU goes: cProfile over many warmed-up
calls at a size where the kernels take microseconds, so the launch path dominates.

    python benchmarks/yoso_host.py [--seq 1024] [--calls 200] [--mode fwd|fwdbwd]
"""

from __future__ import annotations

import cProfile
import pstats
import time

import torch
import typer

from attnbench import get_backend


def main(
    seq: int = 1024,
    heads: int = 4,
    dim: int = 64,
    calls: int = 200,
    mode: str = "fwd",
    backend: str = "yoso-32",
    top: int = 25,
) -> None:
    if not torch.cuda.is_available():
        raise typer.BadParameter("needs a CUDA GPU")
    gen = torch.Generator().manual_seed(0)
    train = mode == "fwdbwd"
    leaves = [
        torch.randn(1, heads, seq, dim, generator=gen).cuda().requires_grad_(train)
        for _ in range(3)
    ]
    grad = torch.randn(1, heads, seq, dim, device="cuda")
    attention = get_backend(backend)

    def call():
        out = attention(*leaves)
        if train:
            out.backward(grad)

    for _ in range(5):
        call()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        call()
    torch.cuda.synchronize()
    per_call = (time.perf_counter() - start) / calls * 1e3
    profile = cProfile.Profile()
    profile.enable()
    for _ in range(calls):
        call()
    torch.cuda.synchronize()
    profile.disable()
    print(f"{backend} {mode} n={seq}: {per_call:.3f} ms a call, wall clock, unprofiled")
    pstats.Stats(profile).sort_stats("tottime").print_stats(top)
    pstats.Stats(profile).sort_stats("cumulative").print_stats(top)


if __name__ == "__main__":
    typer.run(main)
