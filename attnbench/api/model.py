"""`model` as a Python call: the options of `attnbench model`, parsed and checked as the
command does, the whole-model study (YOSO Fig. 7) run by `run.procedure`, the rows returned
as a DataFrame.

Every check that needs neither torch nor numba comes before they load, so a mistyped
number, name or output path is reported at once.
"""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import TYPE_CHECKING

from attnbench.api import parse
from attnbench.api.probes import check_outputs
from attnbench.api.time import DEFAULT_BACKENDS, Finished, finish
from attnbench.api.where import check_executor, cluster_gpus, where
from attnbench.errors import UsageError
from attnbench.measure import DEFAULT_MAX_SPREAD
from attnbench.run.procedure import Progress, run_study

if TYPE_CHECKING:
    import pandas as pd

DEFAULT_SEQ = "512..4096"


def model(
    seq: str | int | list[int] = DEFAULT_SEQ,
    backends: str | list[str] = DEFAULT_BACKENDS,
    layers: int = 6,
    width: int = 256,
    hidden: int = 1024,
    heads: int = 4,
    steps: int = 10,
    warmup: int = 2,
    memory_budget: str | None = None,
    max_batch: int = 64,
    max_spread: str | float = DEFAULT_MAX_SPREAD,
    device: str = "auto",
    seed: int = 0,
    threads: int | None = None,
    executor: str = "in-process",
    ray_address: str | None = None,
    cpus_per_worker: int | None = None,
    resume: bool = False,
    csv: str | Path | None = None,
    json: str | Path | None = None,
    plot: str | Path | None = None,
    progress: Progress | None = None,
) -> pd.DataFrame:
    """Training cost of a whole encoder per instance vs length: the rows of `attnbench
    model` with the same options. Each case trains at the largest batch that fits the
    memory budget (`memory_budget` such as "4GiB"; None: 80% of what is free). Files are
    written only when `csv`, `json` or `plot` is given; a bad option is a `UsageError` with
    the command's text."""
    return run_model(**locals()).frame


def run_model(**options) -> Finished:
    """`model`, returning the whole `Finished` run (the command prints its table from it);
    an option not given takes `model`'s default."""
    defaults = {k: p.default for k, p in inspect.signature(model).parameters.items()}
    options = {**defaults, **options}
    progress = options.pop("progress", None)
    resume = options.pop("resume", False)
    csv, json, plot = (options.pop(k, None) for k in ("csv", "json", "plot"))
    places = {k: options.pop(k, None) for k in ("executor", "ray_address", "cpus_per_worker")}
    places["executor"] = places["executor"] or "in-process"
    threads = options.pop("threads", None)
    checked = check_model_options(**options)
    check_executor(**places)
    csv, json, plot = check_outputs(csv, json, plot)
    with where(threads=threads, **places) as at:
        study = model_study(checked, cluster_gpus(at))
        outcome = run_study(study, at, csv, json, resume, False, progress)
    return finish(study, outcome, plot)


def check_model_options(
    *, seq, backends, layers, width, hidden, heads, steps, warmup, memory_budget, max_batch,
    max_spread, device, seed,
) -> dict:  # fmt: skip
    """Every option of the study that can be checked without torch, checked."""
    seed = parse.check_seed(seed)
    heads = parse.positive(heads, "--heads")
    width = parse.positive(width, "--width", parse.MAX_MODEL_SIZE)
    if width % heads:
        raise UsageError(f"--width: {width} is not a multiple of --heads {heads}")
    return dict(
        seqs=parse.parse_sizes(parse.sizes_text(seq), "--seq"),
        backends=parse.backends_text(backends),
        layers=parse.positive(layers, "--layers", parse.MAX_LAYERS),
        width=width,
        hidden=parse.positive(hidden, "--hidden", parse.MAX_MODEL_SIZE),
        heads=heads,
        steps=parse.positive(steps, "--steps", parse.MAX_COUNT),
        warmup=parse.non_negative(warmup, "--warmup", parse.MAX_COUNT),
        memory_budget=None if memory_budget is None else parse.parse_bytes(memory_budget),
        max_batch=parse.positive(max_batch, "--max-batch", parse.MAX_BATCH),
        max_spread=parse.parse_fraction(max_spread, "--max-spread"),
        device=parse.check_device_name(device),
        seed=seed,
    )


def model_study(checked: dict, gpus: bool | None = None):
    """The study from checked options; here torch loads, with the backends."""
    from attnbench.api.probes import resolve_device
    from attnbench.backends import parse_backends
    from attnbench.studies.model import ModelConfig, ModelStudy

    options = dict(checked)
    config = ModelConfig(**{k: options.pop(k) for k in ("layers", "width", "hidden", "heads")})
    return ModelStudy(
        seqs=options.pop("seqs"),
        backends=parse_backends(options.pop("backends")),
        config=config,
        device=resolve_device(options.pop("device"), gpus),
        **options,
    )
