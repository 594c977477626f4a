"""What a backend spec may name, as plain data, and the reading of a spec's text, without
torch: so `--backends nosuch` is an error line at once, not after the backends import.

`BACKENDS` is the built-in backends' part of the registry as data: each name's shorthand
parameter and its parameters' rules (how `int_param`, `choice_param`, `tau_param` read a
value; None: the backend's own parser, known only with the backend loaded). A test keeps it
equal to what the registered classes say. The registry reads every spec through
`read_spec` and `parse_values` here, so the check and the full parse share their texts.
"""

from __future__ import annotations

import difflib
import re
import sys
from collections.abc import Callable, Mapping
from importlib.metadata import entry_points
from typing import Any, NamedTuple

from attnbench.errors import UsageError

ENTRY_POINT_GROUP = "attnbench.backends"

# Bounds of a backend's integer parameters when none is given: sizes and counts stay in
# int32, seeds in what torch and numpy generators accept, so no value overflows a kernel.
MAX_PARAM = 2**31 - 1
MAX_SEED_PARAM = 2**63 - 1

# The modules under attnbench.backends that register the built-in backends on import.
MODULES = (
    "linformer", "longformer", "nystromformer", "performer", "reformer", "scram", "scram_mc",
    "sdpa", "softmax", "sparse", "yoso", "yoso_c", "yoso_e",
)  # fmt: skip

_RESAMPLE = ("choice", ("call", "fixed"))
_SEED = ("int", 0, MAX_SEED_PARAM)
_YOSO = {
    "m": ("int", 1, 4096),
    "tau": ("tau",),
    "seed": _SEED,
    "hash": ("choice", ("auto", "fast", "gaussian")),
    "resample": _RESAMPLE,
    "impl": ("choice", ("numba", "torch")),
    "backward": ("choice", ("proj", "pairs", "star", "lsh", "dense", "expected")),
    "bound": ("int", 1, MAX_PARAM),
}
_SCRAM_MC = {
    "kappa": ("int", 1, 32),
    "variant": None,
    "L": ("int", 1, MAX_PARAM),
    "T": ("int", 1, 1024),
    "jumps": None,
}

# name: (shorthand parameter, {parameter: rule}), parameters in the order specs spell them
BACKENDS: dict[str, tuple[str | None, dict[str, tuple | None]]] = {
    "linformer": (None, {
        "k": ("int", 1, MAX_PARAM),
        "share": ("choice", ("heads", "kv", "none")),
        "seed": _SEED,
    }),
    "longformer": ("window", {"window": ("int", 1, MAX_PARAM), "global": ("int", 0, MAX_PARAM)}),
    "nystromformer": (None, {
        "landmarks": ("int", 1, MAX_PARAM),
        "conv": None,
        "iterations": ("int", 1, 1000),
        "seed": _SEED,
    }),
    "performer": ("features", {
        "features": ("int", 1, 1 << 20),
        "seed": _SEED,
        "resample": _RESAMPLE,
    }),
    "reformer": (None, {
        "hashes": ("int", 1, 64),
        "bucket": ("int", 1, 1 << 16),
        "seed": _SEED,
        "resample": _RESAMPLE,
    }),
    "scram": (None, {
        "kappa": ("int", 1, 32),
        "variant": None,
        "L": ("int", 1, MAX_PARAM),
        "b": ("int", 0, MAX_PARAM),
        "T": ("int", 1, 1024),
        "jumps": None,
        "seed": _SEED,
    }),
    "scram-mh": (None, {
        **_SCRAM_MC,
        "samples": ("int", 1, 1 << 16),
        "step": ("int", 1, MAX_PARAM),
        "seed": _SEED,
    }),
    "scram-snis": (None, {
        **_SCRAM_MC,
        "samples": ("int", 1, 1 << 16),
        "alpha": None,
        "phi": None,
        "seed": _SEED,
    }),
    "sdpa": (None, {}),
    "softmax": (None, {}),
    "sparse-fixed": (None, {"l": ("int", 0, MAX_PARAM), "c": ("int", 1, MAX_PARAM)}),
    "sparse-strided": (None, {"l": ("int", 0, MAX_PARAM)}),
    "yoso": ("m", _YOSO),
    "yoso-c": ("m", {**_YOSO, "conv": ("int", 1, 4096)}),
    "yoso-e": (None, {"tau": ("tau",), "backward": None}),
}  # fmt: skip


class Names(NamedTuple):
    """A backend as a spec sees it: what a backend class says, as `BACKENDS` writes it."""

    name: str
    shorthand: str | None
    params: dict[str, tuple | None]


KNOWN = {name: Names(name, *entry) for name, entry in sorted(BACKENDS.items())}


def parse_int(text: str) -> int:
    """An integer written in ASCII digits, with an optional minus sign. Python's int() also
    takes other scripts' digits, underscores and spaces ("\uff13\uff12", "3_2"), which would
    make two specs of one backend differ in text: refused, so a spec is written one way."""
    text = str(text)
    if not re.fullmatch(r"-?[0-9]+", text):
        raise ValueError("must be an integer in ASCII digits")
    return int(text)


def parse_rule(rule: tuple, text: str) -> Any:
    """A parameter's value read by its rule: ("int", lo, hi), ("choice", options), ("tau",)
    (1..24 or "auto"); ValueError says what the value must be."""
    kind = rule[0]
    if kind == "int":
        value = parse_int(text)
        if not rule[1] <= value <= rule[2]:
            raise ValueError(f"must be in {rule[1]}..{rule[2]}")
        return value
    if kind == "choice":
        if text not in rule[1]:
            raise ValueError(f"one of {', '.join(rule[1])}")
        return text
    if kind == "tau":
        if str(text).lower() == "auto":
            return "auto"
        value = parse_int(text)
        if not 1 <= value <= 24:
            raise ValueError("must be in 1..24 or 'auto'")
        return value
    raise TypeError(f"unknown parameter rule {rule!r}")


def split_specs(text: str, option: str = "--backends") -> list[str]:
    """A comma list of specs; commas inside a spec's parameters stay with that spec.

    "softmax,yoso:m=16,tau=8,sdpa" -> softmax, yoso:m=16,tau=8, sdpa: an item containing
    "=" continues the previous spec.
    """
    specs: list[str] = []
    for item in (part.strip() for part in text.split(",")):
        if not item:
            raise UsageError(f"{option}: empty item in {text!r}")
        if "=" in item and ":" not in item and specs:
            specs[-1] += "," + item
        else:
            specs.append(item)
    return specs


def find_backend(name: str, known: Mapping[str, Any]) -> tuple[Any, dict[str, str]]:
    """The backend `name` picks among `known` (name: class or `Names`) and the value its
    shorthand sets ("yoso-32": m = "32")."""
    if name in known:
        return known[name], {}
    base, dash, value = name.rpartition("-")
    if dash and base in known and known[base].shorthand:
        return known[base], {known[base].shorthand: value}
    hint = _nearest(name, known)
    hint = f"did you mean {hint!r}? " if hint else ""
    raise UsageError(f"unknown backend {name!r}; {hint}valid: {', '.join(known)}")


def _nearest(name: str, known: Mapping[str, Any]) -> str | None:
    """The valid name a typo most likely meant: a shorthand with its dash left out
    ("yoso32" -> "yoso-32"), else the closest backend name, if any is close."""
    digits = len(name) - len(name.rstrip("0123456789"))
    base, value = name[: len(name) - digits], name[len(name) - digits :]
    if digits and base in known and known[base].shorthand:
        return f"{base}-{value}"
    close = difflib.get_close_matches(name, list(known), n=1, cutoff=0.75)
    return close[0] if close else None


def read_spec(spec: str, known: Mapping[str, Any]) -> tuple[Any, dict[str, str]]:
    """The backend a spec names and its parameters' texts, in the order they are read:
    "yoso-32:tau=10" -> yoso, {m: "32", tau: "10"}. Names the backend has not are left to
    `parse_values`, which reads the values in this order."""
    if not spec or not spec.strip():
        raise UsageError("empty backend name")
    name, _, rest = spec.strip().partition(":")
    backend, raw = find_backend(name.strip(), known)
    by_name = set(raw)  # the shorthand's parameter, set by the name ("yoso-32": m)
    for item in filter(None, (part.strip() for part in rest.split(","))):
        key, eq, text = item.partition("=")
        if not eq:
            raise UsageError(f"backend {spec!r}: expected key=value, got {item!r}")
        key = key.strip()
        if key in raw:
            how = f"by the name {name.strip()!r} and again" if key in by_name else "twice"
            raise UsageError(f"backend {spec!r}: {key} is set {how}; set it once")
        raw[key] = text.strip()
    return backend, raw


def parse_values(backend, raw: dict[str, str], parse: Callable[[str, str], Any]) -> dict:
    """Each parameter's value from its text by `parse(key, text)`, in order; a name the
    backend has not, or a value `parse` refuses (ValueError), is a UsageError."""
    values = {}
    for key, text in raw.items():
        if key not in backend.params:
            valid = ", ".join(backend.params) or "none"
            raise UsageError(f"backend {backend.name!r} has no parameter {key!r}; valid: {valid}")
        try:
            values[key] = parse(key, text)
        except ValueError as exc:
            raise UsageError(f"backend {backend.name!r}: bad {key}={text!r} ({exc})") from None
    return values


def check_backend_names(text: str, option: str = "--backends") -> None:
    """The UsageError `parse_backends(text)` would raise for a name, a parameter name or a
    value its rule refuses, raised without torch; a valid list passes. Where the first error
    cannot be known so (a value only the backend's own parser reads comes first, a spec
    listed twice) it passes too, and the full parse reports it."""
    _check(lambda known, parse: [_check_spec(s, known, parse) for s in split_specs(text, option)])


def check_backend_spec(spec: str) -> None:
    """`check_backend_names` for one spec, as `get_backend(spec)` reads it (--baseline)."""
    _check(lambda known, parse: _check_spec(spec, known, parse))


class _Unknowable(Exception):
    """A value only the backend's own parser can read: the check can go no further."""


def _check_spec(spec: str, known: Mapping[str, Any], parse) -> None:
    backend, raw = read_spec(spec, known)
    parse_values(backend, raw, lambda key, text: parse(backend, key, text))


def _check(run: Callable[[Mapping[str, Any], Callable], Any]) -> None:
    """`run(known, parse)` with the registry's classes if it has loaded (backends a user
    registered are in it), else with `KNOWN` and the rules. With `KNOWN`, an error stands
    only if no other package registers backends: one could add or replace a name."""
    registry = sys.modules.get("attnbench.backends.registry")
    if registry is not None:
        run(registry.backend_classes(), lambda cls, key, text: cls.params[key].parse(text))
        return
    try:
        run(KNOWN, _parse_known)
    except _Unknowable:
        return
    except UsageError:
        if entry_points(group=ENTRY_POINT_GROUP):
            return
        raise


def _parse_known(backend: Names, key: str, text: str) -> Any:
    rule = backend.params[key]
    if rule is None:
        raise _Unknowable(key)
    return parse_rule(rule, text)
