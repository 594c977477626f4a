"""A case, the value every layer passes on: one backend run once by a study on one set of
inputs, sizes, dtype and device; and `CaseInputs`, its q, k, v built once per layout.

The ground floor of the package: it imports nothing of attnbench, so a backend's cost model,
a study and an executor all take a case without an upward import, even one for types only.
Everything that changes a case's result is a field, so `case_id` (a hash of their canonical
text) names the same measurement in any run; study options such as repeats or trials go in
`settings`. Cases are plain picklable values, so an executor can run them in another process.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

MODES = ("fwd", "bwd", "fwdbwd")  # forward, backward of a stored forward, both


@dataclass(frozen=True)
class Case:
    study: str  # "time" | "error" | "maps"
    backend: Any  # a backends.Backend
    inputs: Any  # an inputs.Source
    n: int  # tokens; H*W on a grid
    grid: tuple[int, int] | None  # (H, W) of an image, None for a 1-D sequence
    batch: int
    heads: int
    dim: int
    dtype: str  # "float32", ...
    device: str
    mode: str = "fwd"
    seed: int = 0
    settings: dict[str, Any] = field(default_factory=dict)

    @property
    def case_id(self) -> str:
        """12 hex digits of a SHA-256 over the canonical text of every field."""
        text = json.dumps(
            {
                "study": self.study,
                "backend": self.backend.spec,
                "inputs": self.inputs.label,
                "n": self.n,
                "grid": list(self.grid) if self.grid else None,
                "batch": self.batch,
                "heads": self.heads,
                "dim": self.dim,
                "dtype": self.dtype,
                "device": self.device,
                "mode": self.mode,
                "seed": self.seed,
                "settings": self.settings,
            },
            sort_keys=True,
            default=str,
        )
        return hashlib.sha256(text.encode()).hexdigest()[:12]

    @property
    def torch_dtype(self):
        import torch

        return getattr(torch, self.dtype)

    @property
    def inputs_label(self) -> str:
        """The inputs' name, with the grid size for images ("blobs 16x16")."""
        label = self.inputs.label
        return label if self.grid is None else f"{label} {self.grid[0]}x{self.grid[1]}"

    @property
    def title(self) -> str:
        """What a progress line shows while the case runs."""
        where = f" ({self.grid[0]}x{self.grid[1]})" if self.grid else ""
        return f"{self.backend.label} n={self.n}{where}"


class CaseInputs:
    """q, k, v of the current case's layout for any seed, built on first use and kept while
    cases of the same layout follow (a study's backends share one set of inputs)."""

    def __init__(self) -> None:
        self._layout: tuple | None = None
        self._memo: dict = {}
        self.case: Case | None = None

    def bind(self, case: Case) -> CaseInputs:
        layout = (
            case.inputs.kind, case.inputs.dim, case.n, case.grid, case.batch, case.heads,
            case.dim, case.dtype, case.device,
        )  # fmt: skip
        if layout != self._layout:
            self._layout, self._memo = layout, {}  # the previous layout's tensors are freed
        self.case = case
        return self

    def __call__(self, seed: int | None = None) -> list:
        """q, k, v drawn with `seed` (default: the case's); an image is repeated over the
        case's batch and heads."""
        case = self.case
        seed = case.seed if seed is None else seed
        return self.memo(("qkv", seed), lambda: _make_qkv(case, seed))

    def memo(self, key, make: Callable[[], Any]) -> Any:
        """`make()` once per layout and key: what several cases derive from the same inputs."""
        if key not in self._memo:
            self._memo[key] = make()
        return self._memo[key]

    def clear(self) -> None:
        self._layout, self._memo = None, {}


def _make_qkv(case: Case, seed: int) -> list:
    qkv = case.inputs.make(case.n, seed, case.torch_dtype, case.device, case.grid)
    if case.inputs.on_grid and (case.batch, case.heads) != (1, 1):
        qkv = [t.expand(case.batch, case.heads, -1, -1).contiguous() for t in qkv]
    return qkv
