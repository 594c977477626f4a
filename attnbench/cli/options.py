"""Every option that several commands take, declared once: flag, type and help.

A command gives its own default (`seq: options.Seq = "512..4096"`), so the same option can
start from a different value where a study needs it; the help text stays the same
everywhere. Used as `from attnbench.cli import options` and `seed: options.Seed = 0`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

Seq = Annotated[
    str | None,
    typer.Option(
        help="lengths n: a value 4096 (or 4k), a list 1k,4k or a doubling range 512..16384"
    ),
]
Grid = Annotated[
    str | None,
    typer.Option(
        help="images instead of sequences: HxW, a list, or a doubling range 32x32..256x256"
    ),
]
OneGrid = Annotated[
    str, typer.Option("--grid", help="one image HxW, e.g. 64x64 (1xN: a sequence of N tokens)")
]
Batch = Annotated[int, typer.Option(help="batch size (generated inputs)")]
Heads = Annotated[int, typer.Option(help="attention heads (generated inputs)")]
Dim = Annotated[int, typer.Option(help="head dimension d (generated inputs)")]
Dtype = Annotated[str, typer.Option(help="float32, float64, float16 or bfloat16")]
Device = Annotated[str, typer.Option(help="auto, cpu or cuda")]
Backends = Annotated[str, typer.Option(help="comma list of backend specs")]
Inputs = Annotated[
    str,
    typer.Option(
        help="random, clustered[:size=N], model:yoso-mlm[:layer=L,head=H], "
        "model:minilm[:layer=L,head=H], blobs, image:NAME, svd:NAME, three-blobs, or a "
        ".npz/.pt with q, k, v"
    ),
]
Mode = Annotated[str, typer.Option(help="fwd, bwd or fwdbwd")]
Repeats = Annotated[
    int, typer.Option(help="timed samples per case, at least (shared out over its rounds)")
]
MinTime = Annotated[
    float,
    typer.Option(help="seconds of timed samples per case (per round), at least (fast calls: more)"),
]
MaxSpread = Annotated[
    str, typer.Option(help="a case whose IQR/median exceeds this is marked unstable")
]
Warmup = Annotated[int, typer.Option(help="most warm-up calls (stops early once stable)")]
Baseline = Annotated[str, typer.Option(help="backend the speed-up column compares with")]
Seed = Annotated[int, typer.Option(help="seed of the inputs and of stochastic backends")]
Threads = Annotated[
    int | None, typer.Option(help="CPU threads for torch and numba (default: torch's)")
]
Isolate = Annotated[bool, typer.Option(hidden=True, help="deprecated: --executor isolated")]
Executor = Annotated[
    str,
    typer.Option(
        help="where cases run: in-process, isolated (a fresh process per case: a crash "
        "becomes a `crashed` row) or ray (a Ray cluster: each length's backends on one "
        "worker, a GPU or a block of CPUs each)"
    ),
]
RayAddress = Annotated[
    str | None,
    typer.Option(
        help="the Ray cluster of --executor ray: host:port of its head, ray://host:port or "
        "auto (default: $RAY_ADDRESS, else a local cluster started for the run)"
    ),
]
CpusPerWorker = Annotated[
    int | None,
    typer.Option(
        help="--executor ray: CPUs each worker holds, its threads pinned to them (default: "
        "a CPU node's all, one worker per node; a GPU worker's share of its node's)"
    ),
]
Resume = Annotated[
    bool,
    typer.Option(help="continue the run in --csv/--json: skip the cases it already completed"),
]
Csv = Annotated[
    Path | None, typer.Option(help="write result rows to this CSV (+ .env.json record)")
]
Json = Annotated[Path | None, typer.Option(help="write rows and environment to this JSON file")]
Plot = Annotated[Path | None, typer.Option(help="draw the study's figure to this PNG/SVG/PDF")]
OldOut = Annotated[Path | None, typer.Option("--out", "-o", hidden=True, help="deprecated: --plot")]


def deprecated(old: str, new: str) -> None:
    """One line on stderr: `old` still works in this release and goes in the next; `new`
    says the same."""
    typer.echo(f"attnbench: {old} is deprecated and goes in the next release; use {new}", err=True)


def renamed(ctx: typer.Context, old: str, given, new: str, value):
    """The value of option `new`, or what its deprecated name `old` gave (said once); both
    given is one error line. Options are named with their dashes: "--out", "--plot"."""
    if given is None:
        return value
    name = new.lstrip("-").replace("-", "_")
    # typer bundles its own click: compare the source by its name, not click's enum
    if getattr(ctx.get_parameter_source(name), "name", "DEFAULT") != "DEFAULT":
        from attnbench.errors import UsageError

        raise UsageError(f"{old} is the old name of {new}; give {new} alone")
    deprecated(old, new)
    return given


def executor_name(executor: str, isolate: bool) -> str:
    """--executor in this release's words: `local` and `--isolate` still work, each said
    once to be deprecated."""
    from attnbench.errors import UsageError

    if executor == "local":
        deprecated("--executor local", "--executor in-process")
        executor = "in-process"
    if isolate:
        deprecated("--isolate", "--executor isolated")
        if executor == "ray":
            raise UsageError(
                "--isolate runs cases here; a Ray worker that crashes is already a row"
            )
        executor = "isolated"
    return executor
