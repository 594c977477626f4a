"""A `model:yoso-mlm` checkpoint, checked against its own configuration before any use.

The checkpoint is a file a user can replace, so nothing in it is trusted: it is unpickled
with tensors and plain data only (`nn.mlm.read`), its configuration must name a model this
code can build (known keys, integers in bounds, a YOSO tau), and its weights must be exactly
that model's (same names, same shapes, dense, finite). A checkpoint that fails any of these
is one `UsageError` line when the source is built, instead of a traceback, error rows, or
NaN results that look like measurements.
"""

from __future__ import annotations

import pickle
import warnings
import zipfile
from dataclasses import fields
from pathlib import Path

import torch

from attnbench.errors import UsageError
from attnbench.nn.mlm import VOCAB, MaskedLM, MLMConfig, read

TOP_KEYS = ("config", "state", "facts")  # facts (how it was trained) are optional
# inclusive bounds of the integer fields: the model's sizes, generous but buildable
BOUNDS = {
    "layers": (1, 64),
    "width": (2, 8192),
    "hidden": (1, 32768),
    "heads": (1, 8192),
    "positions": (1, 65536),
    "tau": (1, 24),  # as yoso's tau parameter: bits per hash code
}
# entries of the position table the model builds in float64 from positions x width
MAX_TABLE = 1 << 26
# weights of the model a config describes, about (its blocks' matrices and the embedding):
# the model is built to be compared with the checkpoint's, so this bounds its memory
MAX_WEIGHTS = 1 << 28


def read_checkpoint(path: Path, what: str) -> tuple[MLMConfig, dict[str, torch.Tensor]]:
    """The configuration and weights of the checkpoint at `path`, checked (module doc);
    `what` starts every error line."""
    where = f"{what}: checkpoint {path}"
    saved = _load(path, where)
    if not isinstance(saved, dict) or not all(isinstance(k, str) for k in saved):
        raise UsageError(f"{where} is not a dict of config, state and facts")
    missing = [k for k in TOP_KEYS[:2] if k not in saved]
    if missing:
        raise UsageError(f"{where} has no {missing[0]!r}")
    extra = sorted(set(saved) - set(TOP_KEYS))
    if extra:
        raise UsageError(f"{where} has an unknown key {extra[0]!r}; want {', '.join(TOP_KEYS)}")
    config = check_config(saved["config"], where)
    check_state(saved["state"], config, where)
    return config, saved["state"]


def _load(path: Path, where: str):
    if not zipfile.is_zipfile(path):  # torch.save's format; also a truncated file fails here
        raise UsageError(f"{where} is not a file torch.save wrote, or is cut short")
    try:
        with warnings.catch_warnings():  # the error below says all; no warning first
            warnings.simplefilter("ignore")
            return read(path)
    except pickle.UnpicklingError:
        raise UsageError(
            f"{where} holds objects other than tensors and plain data, which could run code "
            "on loading; refused"
        ) from None
    except Exception as exc:  # noqa: BLE001 - any unreadable file is the user's to fix
        detail = " ".join(str(exc).split())[:200]  # one line, whatever the reader wrote
        raise UsageError(f"{where} cannot be read: {type(exc).__name__} {detail}") from None


def check_config(config, where: str) -> MLMConfig:
    """The MLMConfig `config` (a dict) names; UsageError for a key, type or bound it lacks."""
    if not isinstance(config, dict):
        raise UsageError(f"{where}: config is a {type(config).__name__}, not a dict")
    names = [f.name for f in fields(MLMConfig)]
    unknown = sorted(str(k) for k in set(config) - set(names))
    if unknown:
        raise UsageError(f"{where}: unknown config key {unknown[0]!r}; valid: {', '.join(names)}")
    # a checkpoint from before rotary positions has no `rotary` key: it added sinusoids
    config = {"rotary": False, **config}
    absent = [name for name in names if name not in config]
    if absent:
        raise UsageError(f"{where}: config has no {absent[0]!r}")
    for name, (lo, hi) in BOUNDS.items():
        value = config[name]
        if type(value) is not int or not lo <= value <= hi:  # bool is an int: refused too
            hint = " (a model trained with YOSO)" if name == "tau" else ""
            raise UsageError(
                f"{where}: config {name}={value!r} must be an integer in {lo}..{hi}{hint}"
            )
    if type(config["rotary"]) is not bool:
        raise UsageError(f"{where}: config rotary={config['rotary']!r} must be true or false")
    if config["width"] % config["heads"]:
        raise UsageError(
            f"{where}: config width {config['width']} is not a multiple of heads {config['heads']}"
        )
    width, hidden = config["width"], config["hidden"]
    weights = config["layers"] * (4 * width * width + 2 * width * hidden) + VOCAB * width
    if weights > MAX_WEIGHTS:
        raise UsageError(f"{where}: config describes about {weights} weights, above {MAX_WEIGHTS}")
    if config["positions"] * config["width"] > MAX_TABLE:
        raise UsageError(
            f"{where}: config positions x width = {config['positions'] * config['width']} "
            f"is above {MAX_TABLE}"
        )
    return MLMConfig(**config)


def check_state(state, config: MLMConfig, where: str) -> None:
    """UsageError unless `state` holds exactly the weights of the model `config` builds:
    the same names and shapes, each a dense floating-point tensor with data, every entry
    finite. The model is built on the CPU (`check_config` bounds its size; the meta
    device would take seconds to set up on first use), leaving torch's RNG as it was."""
    if not isinstance(state, dict):
        raise UsageError(f"{where}: state is a {type(state).__name__}, not a dict of tensors")
    with torch.random.fork_rng(devices=[]):
        want = {k: tuple(t.shape) for k, t in MaskedLM(config).state_dict().items()}
    missing = [k for k in want if k not in state]
    if missing:
        raise UsageError(f"{where}: state has no {missing[0]!r} for its config")
    extra = sorted(str(k) for k in set(state) - set(want))
    if extra:
        raise UsageError(f"{where}: state has {extra[0]!r}, which its config's model lacks")
    for key, shape in want.items():
        t = state[key]
        if not isinstance(t, torch.Tensor):
            raise UsageError(f"{where}: state {key!r} is a {type(t).__name__}, not a tensor")
        if t.is_meta or t.is_nested or t.layout != torch.strided or not t.is_floating_point():
            kind = "meta" if t.is_meta else "nested" if t.is_nested else f"{t.layout} {t.dtype}"
            raise UsageError(
                f"{where}: state {key!r} is a {kind} tensor; want dense floating point"
            )
        if tuple(t.shape) != shape:
            raise UsageError(
                f"{where}: state {key!r} has shape {tuple(t.shape)}; its config's model has {shape}"
            )
        if not torch.isfinite(t).all():
            raise UsageError(f"{where}: state {key!r} contains NaN or inf")


def build(config: MLMConfig, state: dict[str, torch.Tensor]) -> MaskedLM:
    """The model of a checked checkpoint, attending through YOSO's expectation."""
    with torch.random.fork_rng(devices=[]):  # its initial weights are overwritten
        model = MaskedLM(config)
    model.load_state_dict(state)
    return model.eval()
