"""Attention maps (YOSO Fig. 6, SCRAM Figs. 2-3): what each method does to the map.

Every backend draws its dense map on the same inputs: the full n x n map of a short
sequence (or image laid out row-major), or one query's map over the key image.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from attnbench.backends import Backend
from attnbench.errors import UsageError
from attnbench.images import grid_qkv
from attnbench.inputs import Inputs

MAX_TOKENS = 4096  # dense maps are n x n


@dataclass
class MapsSpec:
    backends: list[Backend]
    source: str = "image:camera"  # random, clustered, blobs or image:NAME
    grid: tuple[int, int] = (1, 128)
    dim: int = 4
    query: tuple[int, int] | None = None  # (y, x): one query's map over the key image
    seed: int = 0

    def __post_init__(self):
        height, width = self.grid
        if height * width > MAX_TOKENS:
            raise UsageError(f"--grid: maps are dense, at most {MAX_TOKENS} tokens")
        if self.query is not None:
            y, x = self.query
            if not (0 <= y < height and 0 <= x < width):
                raise UsageError(f"--query {y},{x} is outside the {height}x{width} grid")


def make_inputs(spec: MapsSpec) -> list[torch.Tensor]:
    height, width = spec.grid
    if spec.source in ("random", "clustered"):
        return Inputs(spec.source, 1, 1, spec.dim).make(
            height * width, spec.seed, torch.float32, "cpu"
        )
    return list(grid_qkv(spec.source, height, width, spec.dim, spec.seed))


def attention_maps(spec: MapsSpec) -> dict[str, torch.Tensor]:
    """label -> map: [n, n] (no query) or [H, W] (the query's row), float64."""
    q, k, _ = make_inputs(spec)
    height, width = spec.grid
    maps = {}
    with torch.no_grad():
        for backend in spec.backends:
            amap = backend.map_of(q, k, grid=spec.grid)[0, 0].double()
            if spec.query is not None:
                y, x = spec.query
                amap = amap[y * width + x].view(height, width)
            maps[backend.label] = amap
    return maps
