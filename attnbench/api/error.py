"""`error` as a Python call: the options of `attnbench error`, parsed and checked as the
command does, the study run by `run.procedure`, the rows returned as a DataFrame.

Every check that needs neither torch nor numba comes before they load, so a mistyped
number, name or output path is reported at once.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

from attnbench.api import parse
from attnbench.api.probes import check_outputs
from attnbench.api.time import Finished, finish
from attnbench.api.where import cluster_gpus, where
from attnbench.errors import UsageError
from attnbench.run.procedure import Progress, run_study

if TYPE_CHECKING:
    import pandas as pd

DEFAULT_SEQ = "64..4096"
DEFAULT_HASHES = "8..128"  # YOSO Fig. 8's sweep, when no backends are given
MODES = ("fwd", "fwdbwd")  # studies.error.MODES: the outputs' error; also the gradients'
MAX_TAU = 24  # bits per hash code (backends.registry.tau_param)


def error(
    hashes: str | int | list[int] | None = None,
    seq: str | int | list[int] | None = None,
    grid: str | None = None,
    tau: str | int = "8",
    trials: int = 3,
    mc_seeds: int = 8,
    inputs: str = "clustered",
    backends: str | list[str] = "",
    reference: str | None = None,
    mode: str = "fwd",
    executor: str = "in-process",
    ray_address: str | None = None,
    cpus_per_worker: int | None = None,
    resume: bool = False,
    batch: int = 1,
    heads: int = 4,
    dim: int = 64,
    dtype: str = "float32",
    device: str = "auto",
    seed: int = 0,
    threads: int | None = None,
    csv: str | Path | None = None,
    json: str | Path | None = None,
    plot: str | Path | None = None,
    progress: Progress | None = None,
) -> pd.DataFrame:
    """Approximation error of backends against a reference: the rows of `attnbench error`
    with the same options (YOSO Fig. 8 by default: yoso-m for m = 8..128 against yoso-e,
    n = 64..4096). Files are written only when `csv`, `json` or `plot` is given; a bad
    option is a `UsageError` with the command's text."""
    return run_error(**locals()).frame


def run_error(**options) -> Finished:
    """`error`, returning the whole `Finished` run (the command prints its table from it)."""
    options = dict(options)
    progress = options.pop("progress", None)
    resume = options.pop("resume", False)
    threads = options.pop("threads", None)
    csv, json, plot = (options.pop(k, None) for k in ("csv", "json", "plot"))
    places = {k: options.pop(k, None) for k in ("executor", "ray_address", "cpus_per_worker")}
    places["executor"] = places["executor"] or "in-process"
    checked = check_error_options(**options)
    csv, json, plot = check_outputs(csv, json, plot)
    if resume and csv is None and json is None:
        raise UsageError("--resume: give the --csv or --json file of the run to continue")
    with where(threads=threads, **places) as at:
        study = error_study(checked, cluster_gpus(at))
        outcome = run_study(study, at, csv, json, resume, progress=progress)
    return finish(study, outcome, plot)


def check_error_options(
    *, hashes=None, seq=None, grid=None, tau="8", trials=3, mc_seeds=8, inputs="clustered",
    backends="", reference=None, mode="fwd", batch=1, heads=4, dim=64, dtype="float32",
    device="auto", seed=0,
) -> dict:  # fmt: skip
    """Every option of the error study checked that needs no torch, in the command's order."""
    tau = check_tau(tau)
    seed = parse.check_seed(seed, trials, mc_seeds)
    seq, backends = parse.sizes_text(seq), parse.backends_text(backends)
    if seq is not None and grid is not None:
        raise UsageError("--seq and --grid both set the lengths; give one of them")
    grids = parse.parse_grids(grid, "--grid") if grid is not None else None
    seqs = parse.parse_sizes(DEFAULT_SEQ if seq is None else seq, "--seq") if grids is None else []
    batch, heads, dim = (
        parse.positive(value, option)
        for value, option in ((batch, "--batch"), (heads, "--heads"), (dim, "--dim"))
    )
    hashes = parse.sizes_text(hashes)
    if hashes is None:
        hashes = [] if backends.strip() else parse.parse_sizes(DEFAULT_HASHES, "--hashes")
    else:
        hashes = parse.parse_sizes(hashes, "--hashes")
    if mode not in MODES:
        raise UsageError(f"--mode: unknown mode {mode!r}; valid: {', '.join(MODES)}")
    return dict(
        seqs=seqs,
        grids=grids,
        hashes=hashes,
        tau=tau,
        trials=parse.positive(trials, "--trials", parse.MAX_COUNT),
        mc_seeds=parse.positive(mc_seeds, "--mc-seeds", parse.MAX_COUNT),
        inputs=inputs,
        batch=batch,
        heads=heads,
        dim=dim,
        backends=backends,
        dtype=parse.check_dtype_name(dtype),
        device=parse.check_device_name(device),
        seed=seed,
        reference=reference,
        mode=mode,
    )


def check_tau(tau: str | int) -> int | str:
    """--tau: bits per hash code in 1..24 written in ASCII digits, or "auto" (ceil(log2 n)),
    read as the yoso backends' own `tau` parameter reads it."""
    text = str(tau)
    if text.lower() == "auto":
        return "auto"
    if not re.fullmatch(r"-?[0-9]+", text):
        raise UsageError(f"--tau: bad value {text!r} (must be an integer in ASCII digits)")
    if not 1 <= int(text) <= MAX_TAU:
        raise UsageError(f"--tau: bad value {text!r} (must be in 1..{MAX_TAU} or 'auto')")
    return int(text)


def error_study(checked: dict, gpus: bool | None = None):
    """The study from checked options; here torch, numba and scipy load, with the backends
    and the inputs."""
    from attnbench.api.probes import check_inputs_fit, resolve_device
    from attnbench.backends import parse_backends
    from attnbench.studies.error import ErrorStudy

    options = dict(checked)
    seqs, grids, batch, heads, dim = (
        options.pop(k) for k in ("seqs", "grids", "batch", "heads", "dim")
    )
    backends = options.pop("backends")
    study = ErrorStudy(
        seqs=seqs,
        grids=grids,
        inputs=parse.parse_inputs(options.pop("inputs"), batch, heads, dim, seqs, grids),
        backends=parse_backends(backends) if backends.strip() else [],
        dtype=parse.parse_dtype(options.pop("dtype")),
        device=resolve_device(options.pop("device"), gpus),
        reference=_reference(options.pop("reference")),
        **options,
    )
    check_inputs_fit(study.inputs, study.layouts(), study.dtype, study.device)
    return study


def _reference(spec: str | None) -> str | None:
    from attnbench.backends import get_backend

    if spec is None:
        return None
    try:
        return get_backend(spec).spec
    except UsageError as exc:
        raise UsageError(f"--reference: {exc}") from None
