"""Blocks of query rows: what lets a dense n x n computation run in O(rows x n) memory.

A dense n x n float64 matrix takes 32 GiB at n = 65536 (a 256 x 256 image), more than most
machines have, and even at 128 x 128 its 2 GiB temporaries cost more time in page faults
than in arithmetic. Each row of softmax attention, of YOSO-E and of a brute-force top-k
depends on its own query alone, so these are computed over blocks of rows sized to a fixed
budget: memory stays O(rows x n) and the small blocks are reused by the allocator.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

# Bytes of one float64 [..., rows, n] block: small enough for the C allocator to reuse
# its memory from block to block instead of mapping fresh pages each time.
BLOCK_BYTES = 16 * 2**20


def row_blocks(n_rows: int, n_keys: int, planes: int, budget: int | None = None) -> list[slice]:
    """Slices covering rows 0..n_rows-1 such that a float64 [planes, rows, n_keys] block
    stays within `budget` bytes (default `BLOCK_BYTES`; at least one row per block)."""
    budget = BLOCK_BYTES if budget is None else budget
    rows = max(1, budget // (8 * n_keys * max(planes, 1)))
    return [slice(start, min(start + rows, n_rows)) for start in range(0, n_rows, rows)]


def planes_of(q: torch.Tensor) -> int:
    """Batch x heads (everything before the row and feature dimensions)."""
    return q[..., 0, 0].numel()


def by_rows(
    fn: Callable[..., torch.Tensor], q: torch.Tensor, k: torch.Tensor, *rest, budget=None
) -> torch.Tensor:
    """fn(q[..., rows, :], k, *rest) over blocks of query rows, joined along the row
    dimension (-2): the same as fn(q, k, *rest) for any fn whose output row i depends on
    query i alone.

    Each block's result is copied into one output and freed at once: small results kept
    alive between the blocks' large temporaries would split the freed heap into holes too
    small for the next block, and the process would grow by a block per block."""
    out = None
    for rows in row_blocks(q.shape[-2], k.shape[-2], planes_of(q), budget):
        block = fn(q[..., rows, :], k, *rest)
        if out is None:
            out = block.new_empty((*block.shape[:-2], q.shape[-2], block.shape[-1]))
        out[..., rows, :] = block
        del block
    return out
