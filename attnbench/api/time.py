"""`time` and `profile` as Python calls: the options of `attnbench time` and `attnbench
profile`, parsed and checked as the commands do, the study run by `run.procedure`, the rows
returned as a DataFrame.

Every check that needs neither torch nor numba comes before they load (seconds, minutes on
a loaded host), so a mistyped number, name or output path is reported at once.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from attnbench.api import parse
from attnbench.api.probes import check_outputs
from attnbench.api.where import cluster_gpus, where
from attnbench.backends.names import check_backend_spec
from attnbench.case import MODES
from attnbench.errors import UsageError
from attnbench.measure import DEFAULT_MAX_SPREAD, DEFAULT_MIN_TIME_S
from attnbench.run.procedure import Outcome, Progress, run_study

if TYPE_CHECKING:
    import pandas as pd

DEFAULT_BACKENDS = "softmax,sdpa,yoso-e,yoso-32"
DEFAULT_ROUNDS = 5
DEFAULT_SEQ = "4096"


@dataclass
class Finished:
    """A finished study: the study object as it ran, what the run produced, its rows as a
    DataFrame, and the figure drawn (None: not asked for)."""

    study: object
    outcome: Outcome
    frame: pd.DataFrame
    plot: Path | None = None


def time(
    seq: str | int | list[int] | None = None,
    grid: str | None = None,
    batch: int = 1,
    heads: int = 4,
    dim: int = 64,
    dtype: str = "float32",
    device: str = "auto",
    backends: str | list[str] = DEFAULT_BACKENDS,
    inputs: str = "random",
    mode: str = "fwd",
    repeats: int = 10,
    min_time: float = DEFAULT_MIN_TIME_S,
    max_spread: str | float = DEFAULT_MAX_SPREAD,
    warmup: int = 10,
    rounds: int = DEFAULT_ROUNDS,
    seed: int = 0,
    threads: int | None = None,
    baseline: str = "sdpa",
    executor: str = "in-process",
    ray_address: str | None = None,
    cpus_per_worker: int | None = None,
    resume: bool = False,
    csv: str | Path | None = None,
    json: str | Path | None = None,
    plot: str | Path | None = None,
    progress: Progress | None = None,
) -> pd.DataFrame:
    """Runtime and peak memory of one attention call vs sequence length: the rows of
    `attnbench time` with the same options (lengths default to 4096). Files are written
    only when `csv`, `json` or `plot` is given; a bad option is a `UsageError` with the
    command's text."""
    return run_time(**_locals(locals())).frame


def run_time(**options) -> Finished:
    """`time`, returning the whole `Finished` run (the command prints its table from it)."""
    return _timed(_time_study, options)


def profile(
    seq: str | int | list[int] | None = None,
    grid: str | None = None,
    batch: int = 1,
    heads: int = 4,
    dim: int = 64,
    dtype: str = "float32",
    device: str = "auto",
    backends: str | list[str] = DEFAULT_BACKENDS,
    inputs: str = "random",
    mode: str = "fwd",
    stages: str | None = None,
    trace: str | Path | None = None,
    calls: int = 10,
    repeats: int = 10,
    min_time: float = DEFAULT_MIN_TIME_S,
    max_spread: str | float = DEFAULT_MAX_SPREAD,
    warmup: int = 10,
    seed: int = 0,
    threads: int | None = None,
    baseline: str = "sdpa",
    remeasure: bool = False,
    nvtx: bool = False,
    executor: str = "in-process",
    ray_address: str | None = None,
    cpus_per_worker: int | None = None,
    resume: bool = False,
    csv: str | Path | None = None,
    json: str | Path | None = None,
    plot: str | Path | None = None,
    progress: Progress | None = None,
) -> pd.DataFrame:
    """Where each backend's time goes, stage by stage: the rows of `attnbench profile`
    with the same options (`plot` draws the roofline, `trace` keeps a Perfetto trace per
    case in that folder)."""
    return run_profile(**_locals(locals())).frame


def run_profile(**options) -> Finished:
    """`profile`, returning the whole `Finished` run."""
    stage_filter = _stage_filter(options.pop("stages", None))
    calls = parse.positive(options.pop("calls", 10), "--calls", parse.MAX_COUNT)
    trace = _trace_dir(options.pop("trace", None))
    nvtx = options.pop("nvtx", False)
    extra = dict(stage_filter=stage_filter, calls=calls, nvtx=nvtx, trace_dir=trace)
    return _timed(_profile_study, options, extra)


def _locals(values: dict) -> dict:
    return {k: v for k, v in values.items() if k != "self"}


def _time_study():
    from attnbench.studies.time import TimeStudy

    return TimeStudy


def _profile_study():
    from attnbench.studies.profile import ProfileStudy

    return ProfileStudy


def _timed(study_class, options: dict, extra: dict | None = None) -> Finished:
    """A time or profile study from its options, run where they say, and its figure."""
    options = dict(options)
    progress = options.pop("progress", None)
    remeasure = options.pop("remeasure", False)
    resume = options.pop("resume", False)
    rounds = options.pop("rounds", 1)
    csv, json, plot = check_outputs(*(options.pop(k, None) for k in ("csv", "json", "plot")))
    places = {k: options.pop(k, None) for k in ("executor", "ray_address", "cpus_per_worker")}
    places["executor"] = places["executor"] or "in-process"
    threads = options.pop("threads", None)
    rounds = parse.positive(rounds, "--rounds", parse.MAX_COUNT)
    checked = check_time_options(**options)
    with where(threads=threads, **places) as at:
        study = time_study(study_class, checked, cluster_gpus(at), rounds=rounds, **(extra or {}))
        if getattr(study, "nvtx", False):
            from attnbench.measure import is_cuda

            if not is_cuda(study.device):
                raise UsageError(
                    "--nvtx: NVTX ranges are for a CUDA run under nsys; give --device cuda"
                )
        if hasattr(study, "check_stage_filter"):
            study.check_stage_filter()  # before the machine's ceilings are measured
        outcome = run_study(study, at, csv, json, resume, remeasure, progress)
    return finish(study, outcome, plot)


def finish(study, outcome: Outcome, plot: Path | None) -> Finished:
    """The rows as a DataFrame, as `results.read.read_rows` gives them from the study's CSV
    (an empty cell is NaN, not an empty text), and the study's figure drawn if asked."""
    import numpy as np

    from attnbench.results.schema import rows_frame

    frame = rows_frame(outcome.rows).replace("", np.nan)
    if plot is not None:
        from attnbench.views.plots import plot_results

        plot_results(frame, plot, outcome.env)
    return Finished(study, outcome, frame, plot)


def check_time_options(
    *, seq, grid, batch, heads, dim, dtype, device, backends, inputs, mode, repeats,
    min_time, max_spread, warmup, seed, baseline,
) -> dict:  # fmt: skip
    """The options time and profile share, every one checked that needs no torch."""
    if mode not in MODES:
        raise UsageError(f"--mode: unknown mode {mode!r}; valid: {', '.join(MODES)}")
    seq, backends = parse.sizes_text(seq), parse.backends_text(backends)
    check_backend_spec(baseline)
    if seq is not None and grid is not None:
        raise UsageError("--seq and --grid both set the lengths; give one of them")
    grids = parse.parse_grids(grid, "--grid") if grid is not None else None
    seqs = parse.parse_sizes(DEFAULT_SEQ if seq is None else seq, "--seq") if grids is None else []
    return dict(
        seqs=seqs,
        grids=grids,
        batch=parse.positive(batch, "--batch"),
        heads=parse.positive(heads, "--heads"),
        dim=parse.positive(dim, "--dim"),
        dtype=parse.check_dtype_name(dtype),
        device=parse.check_device_name(device),
        backends=backends,
        inputs=inputs,
        mode=mode,
        baseline=baseline,
        repeats=parse.positive(repeats, "--repeats", parse.MAX_COUNT),
        warmup=parse.non_negative(warmup, "--warmup", parse.MAX_COUNT),
        seed=parse.check_seed(seed),
        min_time=parse.check_min_time(min_time),
        max_spread=parse.parse_fraction(max_spread, "--max-spread"),
    )


def time_study(study_class, checked: dict, gpus: bool | None = None, **extra):
    """The study (`study_class()`: the time or the profile study) from checked options;
    here torch, numba and scipy load, with the backends and the inputs."""
    from attnbench.api.probes import check_inputs_fit, resolve_device
    from attnbench.backends import get_backend, parse_backends

    options = dict(checked)
    seqs, grids, batch, heads, dim = (
        options.pop(k) for k in ("seqs", "grids", "batch", "heads", "dim")
    )
    source = parse.parse_inputs(options.pop("inputs"), batch, heads, dim, seqs, grids)
    study = study_class()(
        seqs=seqs,
        grids=grids,
        backends=parse_backends(options.pop("backends")),
        batch=batch,
        heads=heads,
        dim=dim,
        inputs=source,  # an image is repeated over batch and heads
        dtype=parse.parse_dtype(options.pop("dtype")),
        device=resolve_device(options.pop("device"), gpus),
        baseline=get_backend(options.pop("baseline")),
        **options,
        **extra,
    )
    check_inputs_fit(
        study.inputs, study.layouts(), study.dtype, study.device, study.batch, study.heads
    )
    return study


def _stage_filter(text: str | None) -> list[str] | None:
    if text is None:
        return None
    names = [part.strip() for part in parse.list_text(text).split(",")]
    if not all(names):
        raise UsageError(f"--stages: empty item in {text!r}")
    return names


def _trace_dir(path: str | Path | None) -> Path | None:
    """The trace folder, probed before any work: its parent must exist, as every output's
    folder must (`writable_file`), and a trace file must be creatable there. The folder
    itself may be new (the study makes it when the first trace is written), so a bad
    --trace leaves nothing behind."""
    if path is None:
        return None
    from attnbench.api.probes import writable_file

    path = Path(path)
    if path.is_dir():
        writable_file(path / "trace.json", "--trace")
    elif path.exists():
        raise UsageError(f"--trace: {path} is a file; give a folder for the traces")
    else:
        writable_file(path, "--trace")  # its parent: exists, writable
    return path
