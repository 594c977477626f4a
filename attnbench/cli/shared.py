"""What the study commands do alike: check output paths before any work, open the result
sink, run a study under a progress bar, report what was written, and read result files.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from attnbench.cli import core
from attnbench.errors import UsageError

if TYPE_CHECKING:
    from attnbench.inputs import Source


def outputs(csv: Path | None, json: Path | None, plot: Path | None):
    """The three output paths, each probed writable with the right suffix."""
    from attnbench.api.probes import output_path, writable_file
    from attnbench.results.paths import PLOT_SUFFIXES, env_sidecar

    paths = (
        output_path(csv, "--csv", (".csv",)),
        output_path(json, "--json", (".json",)),
        output_path(plot, "--plot", PLOT_SUFFIXES),
    )
    if csv is not None:
        writable_file(env_sidecar(csv), "--csv")
    if csv is not None and json is not None and env_sidecar(csv).resolve() == json.resolve():
        raise UsageError(f"--json: {json} is where --csv keeps its environment record")
    return paths


def set_threads(threads: int | None) -> int:
    from attnbench.api.parse import positive
    from attnbench.measure.threads import set_threads as apply

    return apply(None if threads is None else positive(threads, "--threads"))


def sink(env: dict, csv: Path | None, json: Path | None, resume: bool):
    """The result sink, not yet open: a context that holds its outputs while the run writes
    them; with `resume` it starts from the cases they already hold."""
    from attnbench.results.sink import ResultSink

    if resume and csv is None and json is None:
        raise UsageError("--resume: give the --csv or --json file of the run to continue")
    return ResultSink(env, csv, json, resume=resume)


def inputs(kind: str, batch: int, heads: int, dim: int, seqs, grids) -> Source:
    """The --inputs source, checked against the lengths; a file's own shape replaces batch,
    heads and dim."""
    from attnbench.inputs import Inputs

    source = Inputs(kind, batch, heads, dim)
    if source.on_grid and grids is None:
        raise UsageError(f"--inputs {kind} is an image: give its size with --grid HxW")
    if grids is None:
        source.check_lengths(seqs)
    else:
        source.check_lengths([h * w for h, w in grids], "--grid")
    return source


@dataclass(frozen=True)
class Where:
    """Where a study's cases run: `executor` as `runner.run` takes it (a name, or a pool),
    and the Ray cluster of a pool, whose GPUs decide what --device auto means."""

    executor: object = "in-process"
    cluster: object = None

    @property
    def pooled(self) -> bool:
        return self.cluster is not None

    @property
    def gpus(self) -> bool | None:
        """Whether the cluster has GPUs; None: run here, where torch tells."""
        return None if self.cluster is None else self.cluster.has_gpus


def where(ctx, executor: str, isolate: bool, ray_address: str | None, cpus_per_worker: int | None):
    """--executor and its options, checked; with ray, the cluster is reached now (one error
    line if Ray is missing or the address does not answer) and left when the command
    (`ctx`, its context) ends, however it ends."""
    from functools import partial

    from attnbench.api.parse import positive

    if executor not in ("local", "ray"):
        raise UsageError(f"--executor: unknown executor {executor!r}; valid: local, ray")
    if executor == "local":
        for given, name in ((ray_address, "--ray-address"), (cpus_per_worker, "--cpus-per-worker")):
            if given is not None:
                raise UsageError(f"{name} is an option of --executor ray")
        return Where("isolated" if isolate else "in-process")
    if isolate:
        raise UsageError("--isolate runs cases here; a Ray worker that crashes is already a row")
    if cpus_per_worker is not None:
        cpus_per_worker = positive(cpus_per_worker, "--cpus-per-worker")
    from attnbench.run.ray_cluster import connect
    from attnbench.run.ray_executor import RayPool

    cluster = connect(ray_address)
    ctx.call_on_close(cluster.close)
    return Where(partial(RayPool, cluster=cluster, cpus_per_worker=cpus_per_worker), cluster)


def run_study(study, result_sink=None, at: Where | None = None, threads: int | None = None):
    """Run a study under a progress bar and return every case's rows, resumed ones included.

    The runner validates the study's cases first, so a case that can never run is one error
    line before the sink opens its outputs; the sink then holds them while cases commit.
    A study with a `report` hook (the model study's batch search) reports progress inside a
    case, run here: each report replaces the progress line's description. On a pool the
    bar counts comparison groups as they end, in any order. `threads`: this process's, or
    for a pool the --threads asked for (None: each worker's CPUs).
    """
    from contextlib import nullcontext

    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from attnbench.run.runner import check_resumable, comparison_groups, run

    at = at or Where()

    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )
    progress = Progress(*columns, console=core.progress_console, transient=True)
    task = progress.add_task("starting")
    started = 0

    logged = not core.progress_console.is_terminal  # a log file or pipe: a line per case

    def on_case(case) -> None:
        nonlocal started
        progress.update(task, description=case.title, completed=started)
        started += 1
        if logged:
            line = f"[{started}/{len(study.cases)}] {case.title}"
            core.progress_console.print(line, markup=False, highlight=False, soft_wrap=True)

    ended = 0

    def on_group(group) -> None:
        nonlocal ended
        ended += 1
        title = group[0].title + (f" and {len(group) - 1} more" if len(group) > 1 else "")
        progress.update(task, description=title, completed=ended)
        if logged:
            line = f"[{ended}/{total}] {title}"
            core.progress_console.print(line, markup=False, highlight=False, soft_wrap=True)

    if hasattr(study, "report") and not at.pooled:
        study.report = lambda text: progress.update(task, description=text)
    sweep = run(study, result_sink, at.executor, threads, on_case, on_group)
    total = len(comparison_groups(study, study.cases)) if at.pooled else len(study.cases)
    with result_sink if result_sink is not None else nullcontext():
        if result_sink is not None and result_sink.resume:  # one error line, no progress yet
            check_resumable(study.cases, result_sink)
        with progress:
            progress.update(task, total=total)
            rows = [row for case_rows in sweep for row in case_rows]
            progress.update(task, completed=total)
    return rows


def ceilings(device: str, threads: int, remeasure: bool = False):
    """This machine's ceilings at `threads`: from the cache, or measured now (once per
    machine) with a status line saying so; None for a cluster's GPU this machine lacks
    (each Ray worker sets its rows against its own machine's ceilings)."""
    import torch

    from attnbench.measure import is_cuda
    from attnbench.measure.limits import load_or_measure

    if is_cuda(device) and not torch.cuda.is_available():
        return None

    with core.progress_console.status("measuring this machine's limits (once; cached)") as line:
        return load_or_measure(device, threads, remeasure, on_step=line.update)


def finish(result_sink, rows: list, plot: Path | None, env: dict | None = None) -> None:
    """Name the files written, and draw the study's figure if asked (`env`: the run's
    record, for figures that need it: the roofline's ceilings)."""
    for path in (result_sink.csv, result_sink.json):
        if path is not None:
            core.console.print(f"wrote {path}")
    if plot is not None:
        from attnbench.results.schema import rows_frame
        from attnbench.views.plots import plot_results

        plot_results(rows_frame(rows), plot, env)
        core.console.print(f"wrote {plot}")


def read_results(path: Path):
    """The rows of a result file; UsageError naming the file if it cannot be read."""
    from attnbench.results.read import read_rows

    try:
        return read_rows(path)
    except (ValueError, KeyError, OSError) as exc:
        raise UsageError(f"{path}: cannot read results ({exc})") from None


def run_env(results: Path) -> dict | None:
    """The environment record of a result file: a CSV's .env.json sidecar, a JSON's "env"."""
    import json

    from attnbench.results.paths import env_sidecar

    try:
        if results.suffix.lower() == ".json":
            return json.loads(results.read_text()).get("env")
        sidecar = env_sidecar(results)
        return json.loads(sidecar.read_text()) if sidecar.is_file() else None
    except (OSError, ValueError, AttributeError):  # no usable record: the rows alone
        return None
