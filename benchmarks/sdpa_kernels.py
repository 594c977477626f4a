"""Which fused kernel torch's scaled_dot_product_attention runs on this GPU, per dtype and
pass: the CUDA kernel names torch.profiler records for one forward and one backward.

    python benchmarks/sdpa_kernels.py [--seq 4096]
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
import typer
from torch.profiler import ProfilerActivity, profile


def kernels(fn) -> list[str]:
    fn()  # warm-up: kernel selection and lazy loading stay out of the record
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    names = {e.key for e in prof.key_averages() if e.device_type.name == "CUDA"}
    return sorted(name for name in names if "elementwise" not in name.lower())


def main(seq: int = 4096, heads: int = 4, dim: int = 64) -> None:
    if not torch.cuda.is_available():
        raise typer.BadParameter("needs a CUDA GPU")
    print(torch.cuda.get_device_name(), "torch", torch.__version__)
    for dtype in (torch.float32, torch.bfloat16):
        q, k, v = (
            torch.randn(1, heads, seq, dim, device="cuda", dtype=dtype, requires_grad=True)
            for _ in range(3)
        )
        out = F.scaled_dot_product_attention(q, k, v)
        grad = torch.randn_like(out)
        fwd = kernels(lambda q=q, k=k, v=v: F.scaled_dot_product_attention(q, k, v))
        bwd = kernels(
            lambda q=q, k=k, v=v, g=grad: F.scaled_dot_product_attention(q, k, v).backward(g)
        )
        print(f"{dtype}: forward {fwd}")
        print(f"{dtype}: forward+backward {bwd}")


if __name__ == "__main__":
    typer.run(main)
