"""The input registry: the one place an `--inputs` text becomes a source.

SOURCES lists every kind, each a small Source subclass in the module of its family, in the
order texts are matched: the first kind whose `names` match the text makes the source, and
a text no kind names is a .npz/.pt file. This module imports the families and none of them
imports it, so there is no import cycle.
"""

from __future__ import annotations

from pathlib import Path

import torch

from attnbench.errors import UsageError
from attnbench.inputs.base import Source
from attnbench.inputs.files import FileInputs
from attnbench.inputs.generated import ClusteredInputs, RandomInputs
from attnbench.inputs.images import (
    SHARPNESS,
    BlobsInputs,
    GridInputs,
    ImageInputs,
    SvdInputs,
    ThreeBlobsInputs,
)
from attnbench.inputs.models import ModelInputs
from attnbench.inputs.trained import TrainedInputs

SOURCES: tuple[type[Source], ...] = (
    RandomInputs,
    ClusteredInputs,
    TrainedInputs,  # before ModelInputs, whose `model:` prefix it shares
    ModelInputs,
    BlobsInputs,
    ImageInputs,
    SvdInputs,
    ThreeBlobsInputs,
    FileInputs,  # last: a text no other kind names is a path, if it ends .npz or .pt
)


def source_class(text: str) -> type[Source] | None:
    """The kind `--inputs text` names, or None."""
    return next((cls for cls in SOURCES if cls.matches(text)), None)


def Inputs(text: str, batch: int, heads: int, dim: int) -> Source:
    """The source `--inputs text` names, for `batch` x `heads` of `dim`-dimensional vectors
    (a file or a model sets its own; a picture is one picture, one head). Named like a class
    because callers use it as the constructor of every kind."""
    cls = source_class(text)
    if cls is None:
        kinds = ", ".join(usage for cls in SOURCES for usage in cls.usage)
        raise UsageError(f"--inputs: {Path(text)} is not a .npz or .pt file, nor one of {kinds}")
    return cls(text, batch, heads, dim)


def grid_qkv(
    text: str, height: int, width: int, d: int, seed: int = 0, sharpness: float = SHARPNESS
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """q, k [1, 1, H*W, d] and v [1, 1, H*W, 3] of the picture `text` names ("blobs",
    "image:NAME", "svd:NAME", "three-blobs"), scores spread over about `sharpness`."""
    cls = source_class(text)
    if cls is None or not issubclass(cls, GridInputs):
        *rest, last = (usage for cls in SOURCES if cls.on_grid for usage in cls.usage)
        raise UsageError(f"unknown grid input {text!r}; use {', '.join(rest)} or {last}")
    return cls(text, 1, 1, d).grid_qkv(height, width, seed, sharpness)


def check_resize(text: str, height: int, width: int) -> None:
    """Raise UsageError when the picture `text` names cannot be drawn on an H x W grid
    (other kinds are not drawn on a grid: nothing to check)."""
    cls = source_class(text)
    if cls is not None and cls.on_grid:
        cls(text, 1, 1, 1).check_grid(height, width)
