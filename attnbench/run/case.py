"""A case: one backend run once by a study on one set of inputs, sizes, dtype and device.

Everything that changes a case's result is a field, so `case_id` (a hash of their canonical
text) names the same measurement in any run; study options such as repeats or trials go in
`settings`. Cases are plain picklable values, so an executor can run them in another process.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from attnbench.backends import Backend
    from attnbench.inputs import Source

MODES = ("fwd", "bwd", "fwdbwd")  # forward, backward of a stored forward, both


@dataclass(frozen=True)
class Case:
    study: str  # "time" | "error" | "maps"
    backend: Backend
    inputs: Source
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
