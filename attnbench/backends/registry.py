"""The backend registry: names with parameters ("yoso:m=32,tau=8", "yoso-32"), plugins.

A backend is a class registered under a name with typed parameters and defaults. A spec
string picks the class and overrides parameters; the canonical spec (every parameter
spelled out) names the backend in result rows, so a row says exactly what ran.
"""

from __future__ import annotations

import importlib
import math
import re
import warnings
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass
from functools import partial
from importlib.metadata import entry_points
from typing import TYPE_CHECKING, Any, ClassVar

import torch

from attnbench.backends.cost import Cost, Shape
from attnbench.backends.names import (
    ENTRY_POINT_GROUP,
    MAX_PARAM,
    MODULES,
    parse_rule,
    parse_values,
    read_spec,
    split_specs,
)
from attnbench.backends.names import MAX_SEED_PARAM as MAX_SEED_PARAM
from attnbench.backends.names import parse_int as parse_int
from attnbench.errors import UsageError
from attnbench.measure import is_cuda, stageclock

if TYPE_CHECKING:
    from attnbench.case import Case


@dataclass(frozen=True)
class Param:
    """A backend parameter: default, a parser from text (raises ValueError), and help.
    `rule` is the parser as data when `names.parse_rule` is it (None: a parser of its own),
    so a spec's values are checked before the backend loads."""

    default: Any
    parse: Callable[[str], Any]
    help: str = ""
    rule: tuple | None = None


def rule_param(default: Any, rule: tuple, help: str = "") -> Param:
    """A parameter read by `names.parse_rule(rule, text)`."""
    return Param(default, partial(parse_rule, rule), help, rule)


def parse_float(text: str) -> float:
    """A finite number in ASCII: digits, a point, an exponent (as `parse_int`, for floats)."""
    text = str(text)
    if not re.fullmatch(r"-?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][-+]?[0-9]+)?", text):
        raise ValueError("must be a number in ASCII digits")
    value = float(text)
    if not math.isfinite(value):
        raise ValueError("must be finite")
    return value


def int_param(default: int, lo: int = 1, hi: int | None = None, help: str = "") -> Param:
    """An integer in lo..hi (hi: MAX_PARAM when None)."""
    return rule_param(default, ("int", lo, MAX_PARAM if hi is None else hi), help)


def choice_param(default: str, options: tuple[str, ...], help: str = "") -> Param:
    """A parameter taking one of `options`."""
    return rule_param(default, ("choice", tuple(options)), help)


def tau_param(default: int | str = 8) -> Param:
    """tau: bits per hash code, 1..24, or "auto" = ceil(log2 n) as in YOSO's efficiency scripts."""
    return rule_param(default, ("tau",), "bits per hash code (1..24) or auto = ceil(log2 n)")


def token_grid(grid: tuple[int, int] | None, n: int) -> tuple[int, int]:
    """(H, W) of n tokens: the given grid, checked, or (1, n) for a sequence."""
    if grid is None:
        return (1, n)
    height, width = grid
    if height < 1 or width < 1 or height * width != n:
        raise UsageError(f"grid {height}x{width} does not hold the sequence's {n} tokens")
    return (height, width)


def resolve_tau(tau: int | str, n: int) -> int:
    return max(1, math.ceil(math.log2(n))) if tau == "auto" else int(tau)


class Backend:
    """An attention method callable as `backend(q, k, v, mask=None)` on [B, H, n, d] tensors.

    `mask` is an optional bool [B, n] token mask (True = real token): masked keys get no
    attention and the output rows of masked tokens are zero, for every backend alike.
    `grid` = (H, W) lays the n = H*W tokens out as an image, row-major (token y*W + x);
    None is a 1-D sequence. Only `spatial` backends look at it; the rest ignore it.
    """

    name: ClassVar[str]
    params: ClassVar[dict[str, Param]] = {}
    shorthand: ClassVar[str | None] = None  # "yoso-32" sets this parameter to 32
    complexity: ClassVar[str] = ""
    devices: ClassVar[tuple[str, ...]] = ("cpu", "cuda")
    backward: ClassVar[bool] = True
    stochastic: ClassVar[bool] = False
    spatial: ClassVar[bool] = False  # forward takes the grid (H, W) of the tokens
    # Output rows are l2-normalised (YOSO): only their direction compares with another
    # backend's output, so errors of magnitude (relative Frobenius, max-abs, MC bias) do not.
    unit_rows: ClassVar[bool] = False
    # map_blocks computes only the rows asked for (else it returns the whole dense map)
    map_in_blocks: ClassVar[bool] = False
    summary: ClassVar[str] = ""
    # The named parts of a call, in order: `stage(name)` marks each in profiler traces, and
    # `cost(shape)` gives each one's work. "backward" is what a backward pass does outside
    # the backward stages the backend marks itself (the profile study marks it).
    stages: ClassVar[tuple[str, ...]] = ()
    backward_stages: ClassVar[tuple[str, ...]] = ("backward",)

    def __init__(self, **values: Any):
        self.values = {key: param.default for key, param in self.params.items()}
        self.values.update(values)

    def __call__(self, q, k, v, mask=None, grid: tuple[int, int] | None = None):
        if not self.spatial:
            return self.forward(q, k, v, mask)
        return self.forward(q, k, v, mask, token_grid(grid, k.shape[-2]))

    def forward(self, q, k, v, mask=None, grid=None):  # pragma: no cover - abstract
        raise NotImplementedError

    def attention_map(self, q, k, mask=None) -> torch.Tensor:
        """Dense [B, H, n, n] attention weights for small n (what the maps and metrics show)."""
        raise NotImplementedError(f"{self.name} has no dense attention map")

    def map_of(self, q, k, mask=None, grid: tuple[int, int] | None = None) -> torch.Tensor:
        """`attention_map`, with the grid for spatial backends (as `__call__` does)."""
        if not self.spatial:
            return self.attention_map(q, k, mask)
        return self.attention_map(q, k, mask, token_grid(grid, k.shape[-2]))

    def map_blocks(self, q, k, blocks: list[slice], grid: tuple[int, int] | None = None):
        """The attention map as (rows, weights [B, H, rows, n]) for each slice of query rows
        in `blocks`, so a caller can reduce a large map without holding all n x n entries.

        With `map_in_blocks` False this is one block, the whole `map_of`. Backends whose map
        row i depends on query i alone set `map_in_blocks` and get the rows from
        `attention_map(q[rows], k)`; others that can (SCRAM) override this."""
        if not self.map_in_blocks:
            yield slice(0, q.shape[-2]), self.map_of(q, k, grid=grid)
            return
        for rows in blocks:
            yield rows, self.map_of(q[..., rows, :], k, grid=grid)

    def stage(self, name: str):
        """The marker of one stage, named "backend.stage": a span of the running stage
        clock (how `attnbench profile` times stages on the CPU), else a profiler range
        (what a trace shows; an NVTX range on CUDA when torch emits them), else nothing,
        as a range costs microseconds and some backends mark dozens a call."""
        clock = stageclock.running()
        if clock is not None:
            return clock.span(f"{self.name}.{name}")
        if not torch._C._autograd._profiler_enabled():
            return nullcontext()
        return torch.profiler.record_function(f"{self.name}.{name}")

    def marking(self) -> bool:
        """Whether `stage` marks anything now: a stage clock or a profiler runs. A backend
        that must split its work to mark it (SCRAM's passes) splits it only then."""
        return stageclock.running() is not None or torch._C._autograd._profiler_enabled()

    def stages_in(self, mode: str, device: str = "cpu") -> tuple[str, ...]:
        """The stages a call in `mode` on `device` runs: forward, backward, or both (the
        keys of `cost` for that mode and device)."""
        forward = self.stages if mode in ("fwd", "fwdbwd") else ()
        backward = self.backward_stages if mode in ("bwd", "fwdbwd") else ()
        return forward + backward

    def cost(self, shape: Shape) -> dict[str, Cost]:
        """The algorithmic work of each stage that a call of `shape` runs (`stages_in`
        its mode), by stage name; empty when the backend states no cost model."""
        return {}

    def predicted_bytes(self, batch: int, heads: int, n: int, d: int, itemsize: int) -> int:
        """Bytes of the largest intermediates, to skip cases that cannot fit before running."""
        return 0

    def unsupported(self, case: Case) -> list[str]:
        """Why this backend cannot run `case` on this machine or in this mode (empty: it
        can). The runner records the reasons in a skipped row and goes on."""
        reasons = []
        device = "cuda" if is_cuda(case.device) else case.device
        if device not in self.devices:
            reasons.append(f"{self.name} does not run on {case.device}")
        if case.mode != "fwd" and not self.backward:
            reasons.append(f"{self.name} has no backward pass")
        return reasons

    def validate(self, case: Case) -> None:
        """Raise UsageError when these parameters can never run `case` (a window larger than
        the grid): the runner checks every case of a sweep before any work."""

    def check_at_most(self, key: str, limit: int, meaning: str) -> None:
        """UsageError when parameter `key` is above `limit`, the most it can mean in a case
        (`meaning` says why): a size past the sequence adds no tokens, only memory, as
        l=9999 at n = 64 took gigabytes for a 64-token pattern."""
        value = self.values[key]
        if value > limit:
            raise UsageError(f"{self.name}: {key}={value} is above {limit}, {meaning}")

    def diagnostics(self, q, k, v, grid: tuple[int, int] | None = None) -> dict[str, float]:
        """What the backend knows about its own work on these inputs, by name (a search's
        hit rate, a sampler's acceptance): metrics a study records beside its errors."""
        return {}

    def impl(self, device: str) -> str:
        return "torch"

    def with_values(self, **values: Any) -> Backend:
        return type(self)(**{**self.values, **values})

    @property
    def spec(self) -> str:
        if not self.values:
            return self.name
        return self.name + ":" + ",".join(f"{k}={v}" for k, v in self.values.items())

    @property
    def label(self) -> str:
        """Short display name: only parameters that differ from the defaults, shorthand used."""
        changed = {k: v for k, v in self.values.items() if v != self.params[k].default}
        name = self.name
        if self.shorthand and self.shorthand in self.values:
            name = f"{self.name}-{self.values[self.shorthand]}"
            changed.pop(self.shorthand, None)
        return name + (":" + ",".join(f"{k}={v}" for k, v in changed.items()) if changed else "")

    def __repr__(self) -> str:
        return f"<backend {self.spec}>"


_REGISTRY: dict[str, type[Backend]] = {}
_plugins_loaded = False


def register(cls: type[Backend]) -> type[Backend]:
    """Class decorator: make a backend available by its `name`. The built-in backends are
    registered first, so a backend registered under a built-in's name replaces it."""
    if not getattr(cls, "name", None):
        raise TypeError(f"{cls.__name__} needs a `name` to be registered")
    if not cls.__module__.startswith(f"{__package__}."):
        load_builtins()
    _REGISTRY[cls.name] = cls
    return cls


def load_builtins() -> None:
    """Import the modules of the built-in backends (`names.MODULES`), which register them:
    on first use of the registry, not on import of the package, so `names` loads alone."""
    for module in MODULES:
        importlib.import_module(f"{__package__}.{module}")


def load_plugins() -> None:
    """Import third-party backends from the `attnbench.backends` entry-point group once.

    An entry point may name a Backend subclass (registered here) or a module that registers
    its backends on import. A broken plugin warns instead of breaking the tool.
    """
    global _plugins_loaded
    if _plugins_loaded:
        return
    _plugins_loaded = True
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        try:
            obj = ep.load()
        except Exception as exc:  # noqa: BLE001 - a plugin must not take the tool down
            warnings.warn(f"attnbench plugin {ep.name!r} failed to load: {exc}", stacklevel=2)
            continue
        if isinstance(obj, type) and issubclass(obj, Backend):
            register(obj)


def backend_classes() -> dict[str, type[Backend]]:
    """Every registered backend by name, sorted: the built-ins, then other packages'."""
    load_builtins()
    load_plugins()
    return dict(sorted(_REGISTRY.items()))


def get_backend(spec: str) -> Backend:
    """Build a backend from a spec: "sdpa", "yoso:m=16,tau=8", "yoso-32", "yoso-32:tau=10"
    (read by `names.read_spec`, which `names.check_backend_names` shares)."""
    cls, raw = read_spec(spec, backend_classes())
    return cls(**parse_values(cls, raw, lambda key, text: cls.params[key].parse(text)))


def parse_backends(text: str, option: str = "--backends") -> list[Backend]:
    """A comma list of specs (`names.split_specs`: "softmax,yoso:m=16,tau=8,sdpa" is three),
    each backend listed once."""
    backends = [get_backend(s) for s in split_specs(text, option)]
    seen = [b.spec for b in backends]
    if len(set(seen)) != len(seen):
        raise UsageError(f"{option}: a backend is listed twice in {text!r}")
    return backends
