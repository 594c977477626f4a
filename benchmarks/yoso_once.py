"""One warmed-up YOSO forward + backward on a GPU between cudaProfilerStart and Stop, for
Nsight Compute to profile only those kernels:

    ncu --profile-from-start off --clock-control none python benchmarks/yoso_once.py
"""

from __future__ import annotations

import torch
import typer

from attnbench import get_backend


def main(seq: int = 16384, heads: int = 4, dim: int = 64, backend: str = "yoso-32") -> None:
    if not torch.cuda.is_available():
        raise typer.BadParameter("needs a CUDA GPU")
    gen = torch.Generator().manual_seed(0)
    leaves = [
        torch.randn(1, heads, seq, dim, generator=gen).cuda().requires_grad_() for _ in range(3)
    ]
    grad = torch.randn(1, heads, seq, dim, device="cuda")
    attention = get_backend(backend)
    for _ in range(2):  # JIT compilation and first-call work stay out of the profile
        attention(*leaves).backward(grad)
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    attention(*leaves).backward(grad)
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()


if __name__ == "__main__":
    typer.run(main)
