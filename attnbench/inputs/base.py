"""What every input source is: the `Source` base class and the `--inputs` options parser.

This module imports no other module of attnbench.inputs: the families (generated, files,
images, models) build on it and the registry imports the families, so imports only point
down and there is no cycle.
"""

from __future__ import annotations

from typing import ClassVar

import torch

from attnbench.errors import UsageError


def parse_options(text: str, allowed: tuple[str, ...], kind: str) -> dict[str, int]:
    """`a=1,b=2` -> {"a": 1, "b": 2}: non-negative integers in ASCII digits, known keys,
    each once."""
    options: dict[str, int] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        key, eq, value = item.partition("=")
        key = key.strip()
        if not eq or key not in allowed:
            raise UsageError(
                f"--inputs {kind}: bad option {item!r}; valid: "
                + ", ".join(f"{name}=N" for name in allowed)
            )
        if key in options:
            raise UsageError(f"--inputs {kind}: {key} given twice")
        value = value.strip()
        # ASCII digits only: str.isdigit and int() also take other scripts' digits and "_"
        if not value.isascii() or not value.isdigit():
            raise UsageError(f"--inputs {kind}: {key} must be a non-negative integer")
        options[key] = int(value)
    return options


class Source:
    """A source of (q, k, v) [batch, heads, n, dim] for a length and a trial seed.

    `make` is deterministic: `draw` builds the tensors on the CPU from the seed alone and
    `make` then moves them, so the same seed gives the same inputs on every device. A source
    is cheap to build and to pickle (the isolated executor ships it with every case):
    anything heavy is loaded on first use. `kind` is the `--inputs` text it was made from.
    """

    # The `--inputs` texts naming this kind: a name as is ("random"), or one ending in ":"
    # that prefixes a NAME or options ("model:"). The registry matches texts against them.
    names: ClassVar[tuple[str, ...]] = ()
    usage: ClassVar[tuple[str, ...]] = ()  # how help and error messages list the kind
    on_grid: ClassVar[bool] = False  # an image: exists only on an H x W grid (--grid)
    fixed_shape: ClassVar[bool] = False  # the source sets batch, heads and dim (file, model)

    def __init__(self, kind: str, batch: int, heads: int, dim: int):
        self.kind, self.batch, self.heads, self.dim = kind, batch, heads, dim

    @classmethod
    def matches(cls, text: str) -> bool:
        """Whether `--inputs text` names this kind (see `names`)."""
        return any(
            text == name or (name.endswith(":") and text.startswith(name)) for name in cls.names
        )

    @property
    def label(self) -> str:
        """The name result rows give the inputs."""
        return self.kind

    def check_lengths(self, seqs: list[int], option: str = "--seq") -> None:
        """Raise UsageError when a length is more than the source holds (default: any fits)."""

    def check_grid(self, height: int, width: int) -> None:
        """Raise UsageError when the source cannot be drawn on an H x W grid (default: any)."""

    def draw(
        self, n: int, seed: int, grid: tuple[int, int] | None
    ) -> list[torch.Tensor]:  # pragma: no cover - abstract
        """q, k, v of n tokens (H*W on `grid`) for `seed`, on the CPU."""
        raise NotImplementedError

    def make(
        self, n: int, seed: int, dtype: torch.dtype, device: str, grid=None
    ) -> list[torch.Tensor]:
        return [t.to(device=device, dtype=dtype).contiguous() for t in self.draw(n, seed, grid)]
