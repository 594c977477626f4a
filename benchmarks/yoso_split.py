"""Where YOSO's forward time goes on this machine: hashing vs cumulation, each set against
a measured machine limit (sgemm FLOP rate, cache and DRAM copy bandwidth).

    python benchmarks/yoso_split.py --seq 4096 --seq 16384 --csv plots/yoso-cpu-split.csv

The work counts are the algorithm's own (adds of the butterflies, multiply-adds of the
projections, value rows moved through the hash tables), not hardware counters, so the
"share of limit" column is an estimate of headroom, not a measurement of it.
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import torch
import torch.nn.functional as F
import typer
from rich.console import Console
from rich.table import Table

from attnbench import get_backend
from attnbench.kernels.lsh import dispatch, reference
from attnbench.measure.allocator import steady_allocator
from attnbench.measure.threads import set_threads
from attnbench.measure.timing import time_call
from attnbench.results.formats import atomic_write

app = typer.Typer(add_completion=False)


def _ms(fn, repeats: int) -> float:
    return time_call(fn, "cpu", repeats, 10).median


def machine_limits(repeats: int) -> dict[str, float]:
    """Peak rates measured with torch: sgemm GFLOP/s, L2-sized and DRAM-sized copy GB/s."""
    a = torch.randn(2048, 2048)
    gflops = 2 * 2048**3 / _ms(lambda: a @ a, repeats) / 1e6
    limits = {"sgemm_gflops": gflops}
    for name, numel in (("cache_gbs", 64 * 1024), ("dram_gbs", 64 * 2**20)):
        src, dst = torch.randn(numel), torch.empty(numel)
        loops = max(1, 2**24 // numel)

        def copy(src=src, dst=dst, loops=loops):
            for _ in range(loops):
                dst.copy_(src)

        limits[name] = 2 * 4 * numel * loops / _ms(copy, repeats) / 1e6
    return limits


def stages(n: int, groups: int, d: int, m: int, tau: int, repeats: int) -> list[dict]:
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(groups, n, d, generator=gen) for _ in range(3))
    qn, kn = F.normalize(q, dim=-1), F.normalize(k, dim=-1)
    fast = reference.fast_diagonals(groups, d, m, tau, 0)
    proj = reference.gaussian_projections(groups, d, m, tau, 0)
    qc = dispatch.hash_codes(qn, fast, "fast", tau, m)
    kc = dispatch.hash_codes(kn, fast, "fast", tau, m)
    rows = 2 * groups * n  # queries and keys
    dp, parts = fast.shape[-1], fast.shape[1]
    backend = get_backend(f"yoso:m={m},tau={tau}")
    qkv4 = [t.view(1, groups, n, d) for t in (q, k, v)]

    def forward():
        with torch.no_grad():
            return backend(*qkv4)

    table_rows = 2 * groups * n * m  # one scatter and one gather per row and hash
    return [
        {
            "stage": "normalise q, k (torch)",
            "ms": _ms(lambda: (F.normalize(q, dim=-1), F.normalize(k, dim=-1)), repeats),
            "gflop": 3 * rows * d / 1e9,
            "gbyte": 2 * rows * d * 4 / 1e9,
        },
        {
            "stage": "fast hash q, k (numba)",
            "ms": _ms(
                lambda: (
                    dispatch.hash_codes(qn, fast, "fast", tau, m),
                    dispatch.hash_codes(kn, fast, "fast", tau, m),
                ),
                repeats,
            ),
            "gflop": rows * parts * 3 * dp * (math.log2(dp) + 1) / 1e9,
            "gbyte": rows * (d + m) * 4 / 1e9,
        },
        {
            "stage": "gaussian hash q, k (numba)",
            "ms": _ms(
                lambda: (
                    dispatch.hash_codes(qn, proj, "gaussian", tau, m),
                    dispatch.hash_codes(kn, proj, "gaussian", tau, m),
                ),
                repeats,
            ),
            "gflop": 2 * rows * d * m * tau / 1e9,
            "gbyte": rows * (d + m) * 4 / 1e9,
        },
        {
            "stage": "gaussian hash q, k (torch matmul)",
            "ms": _ms(
                lambda: (
                    reference.gaussian_codes(qn, proj, tau),
                    reference.gaussian_codes(kn, proj, tau),
                ),
                repeats,
            ),
            "gflop": 2 * rows * d * m * tau / 1e9,
            "gbyte": rows * (d + m * tau) * 4 / 1e9,
        },
        {
            "stage": "cumulation (numba)",
            "ms": _ms(lambda: dispatch.cumulation(qc, kc, v, tau), repeats),
            "gflop": table_rows * d / 1e9,
            "gbyte": 2 * table_rows * d * 4 / 1e9,  # each row add reads and writes d floats
        },
        {
            "stage": "yoso forward, all stages",
            "ms": _ms(forward, repeats),
            "gflop": float("nan"),
            "gbyte": float("nan"),
        },
    ]


@app.command()
def main(
    seq: list[int] = typer.Option([4096, 16384], help="sequence lengths"),
    heads: int = 4,
    dim: int = 64,
    m: int = 32,
    tau: int = 8,
    repeats: int = 20,
    threads: int = typer.Option(None, min=1, help="CPU threads for torch and numba"),
    csv: Path = typer.Option(None, help="write the table here"),
) -> None:
    set_threads(threads)
    steady_allocator()
    limits = machine_limits(repeats)
    console = Console()
    console.print(
        f"limits: sgemm {limits['sgemm_gflops']:.0f} GFLOP/s, cache copy "
        f"{limits['cache_gbs']:.0f} GB/s, DRAM copy {limits['dram_gbs']:.0f} GB/s, "
        f"{torch.get_num_threads()} threads"
    )
    records = []
    for n in seq:
        for row in stages(n, heads, dim, m, tau, repeats):
            gflops = row["gflop"] / row["ms"] * 1e3
            gbs = row["gbyte"] / row["ms"] * 1e3
            records.append({"seq": n, **row, "gflops": gflops, "gbs": gbs, **limits})
    df = pd.DataFrame(records)
    table = Table("n", "stage", "ms", "GFLOP/s", "% sgemm", "GB/s", "% cache copy")
    for r in df.itertuples():
        table.add_row(
            str(r.seq), r.stage, f"{r.ms:.2f}", f"{r.gflops:.1f}",
            f"{100 * r.gflops / r.sgemm_gflops:.0f}", f"{r.gbs:.1f}",
            f"{100 * r.gbs / r.cache_gbs:.0f}",
        )  # fmt: skip
    console.print(table)
    if csv:
        atomic_write(csv, df.to_csv(index=False))


if __name__ == "__main__":
    app()
