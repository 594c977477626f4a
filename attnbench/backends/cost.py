"""What one backend call costs in work: floating-point operations and bytes moved, per stage.

Two counts, never mixed. The *algorithmic* count is the work the method itself does, stage
by stage (a sparse method counts only the entries it computes, so it stays exact under
masks and windows). The *dense-equivalent* count is what exact softmax attention would do
for the same shapes: 4 B H n^2 d forward, x2.5 backward, x3.5 both (FlashAttention's
convention), so every method's throughput can be set on one scale. Counts are of the
method, not of hardware events: a rate derived from them is an estimate of headroom.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from attnbench.case import Case

# dense-equivalent work of each mode, relative to the forward pass
DENSE_FACTOR = {"fwd": 1.0, "bwd": 2.5, "fwdbwd": 3.5}


@dataclass(frozen=True)
class Cost:
    """The work of one stage of one call.

    `matmul_flops`: 2 per multiply-add of a matrix product (what torch's FlopCounterMode
    counts); `other_flops`: everything else (elementwise, reductions, transforms,
    comparisons), one per operation; `bytes`: compulsory traffic, each input read once and
    each output written once; `working_set`: bytes that must stay close to the cores while
    the stage runs (its hash tables, its score matrix), which picks the cache level whose
    bandwidth bounds it (None: `bytes`). A stage summed from the costs of several pieces of
    work (a streaming product, then a cumulation in cache) keeps them as `parts`, so each
    is set against its own roofline bound rather than all against the largest one's."""

    matmul_flops: float = 0.0
    other_flops: float = 0.0
    bytes: float = 0.0
    working_set: float | None = None
    parts: tuple[Cost, ...] = field(default=(), compare=False, repr=False)

    @property
    def flops(self) -> float:
        return self.matmul_flops + self.other_flops

    @property
    def footprint(self) -> float:
        return self.bytes if self.working_set is None else self.working_set

    def pieces(self) -> tuple[Cost, ...]:
        """The pieces of work bounded one by one: the parts summed, or this cost alone."""
        return self.parts or (self,)

    def roofline_parts(self) -> list[tuple[float, float, float, float]]:
        """(flops, bytes, working set, flops that cannot fuse into FMAs) of each piece, as
        `measure.roofline.call_throughput` takes them."""
        return [(c.flops, c.bytes, c.footprint, c.other_flops) for c in self.pieces()]

    def __add__(self, other: Cost) -> Cost:
        working = None
        if self.working_set is not None or other.working_set is not None:
            working = max(self.footprint, other.footprint)
        return Cost(
            self.matmul_flops + other.matmul_flops,
            self.other_flops + other.other_flops,
            self.bytes + other.bytes,
            working,
            self.pieces() + other.pieces(),
        )

    def __mul__(self, factor: float) -> Cost:
        """The stage repeated `factor` times: the work scales, the working set does not."""
        return Cost(
            self.matmul_flops * factor,
            self.other_flops * factor,
            self.bytes * factor,
            self.working_set,
            tuple(part * factor for part in self.parts),
        )

    __rmul__ = __mul__


@dataclass(frozen=True)
class Shape:
    """The sizes one call works on: [batch, heads, n, dim] queries and keys, [.., dim_v]
    values, elements of `itemsize` bytes, in `mode` (fwd, bwd, fwdbwd) on `device`."""

    batch: int
    heads: int
    n: int
    dim: int
    dim_v: int | None = None
    itemsize: int = 4
    mode: str = "fwd"
    device: str = "cpu"
    grid: tuple[int, int] | None = None

    @property
    def planes(self) -> int:
        """Batch x heads: the independent attention problems of the call."""
        return self.batch * self.heads

    @property
    def dv(self) -> int:
        return self.dim if self.dim_v is None else self.dim_v

    @property
    def forward(self) -> bool:
        return self.mode in ("fwd", "fwdbwd")

    @property
    def backward(self) -> bool:
        return self.mode in ("bwd", "fwdbwd")

    def elements(self, *dims: int) -> int:
        """Elements of a [planes, *dims] tensor."""
        count = self.planes
        for dim in dims:
            count *= dim
        return count

    def bytes(self, *dims: int, itemsize: int | None = None) -> float:
        """Bytes of a [planes, *dims] tensor (of the call's dtype unless `itemsize`)."""
        return float(self.elements(*dims) * (self.itemsize if itemsize is None else itemsize))

    @classmethod
    def of(cls, case: Case) -> Shape:
        import torch

        itemsize = torch.empty((), dtype=case.torch_dtype).element_size()
        return cls(
            batch=case.batch, heads=case.heads, n=case.n, dim=case.dim, itemsize=itemsize,
            mode=case.mode, device=case.device, grid=case.grid,
        )  # fmt: skip


def matmul(batch: int, rows: int, inner: int, cols: int) -> float:
    """FLOPs of `batch` products [rows, inner] @ [inner, cols]: 2 per multiply-add."""
    return 2.0 * batch * rows * inner * cols


def dense_equivalent(shape: Shape) -> float:
    """Softmax attention's FLOPs for these shapes: 4 B H n^2 d forward (QK^T and PV, two
    flops a multiply-add), x2.5 backward, x3.5 forward and backward."""
    return 4.0 * shape.planes * shape.n * shape.n * shape.dim * DENSE_FACTOR[shape.mode]


def total(costs: Iterable[Cost]) -> Cost:
    """The sum of several stages' costs (a whole call's: `total(cost(shape).values())`)."""
    out = Cost()
    for cost in costs:
        out = out + cost
    return out


def autograd_backward(stages: Iterable[Cost], constant_products: float = 0.0) -> Cost:
    """Autograd's backward of the forward `stages` (those it differentiates).

    A product A @ B costs two products of its size (dA = dC B^T, dB = A^T dC), so the
    backward's matmul flops are twice the stages', less `constant_products`: the forward
    flops of products one of whose operands is a constant (a projection, a kernel), whose
    gradient is one product. Elementwise work and traffic are taken as twice the forward's
    (each op's local derivative, then the chain rule; saved tensors and incoming gradients
    read, gradients written): an estimate, not a count."""
    forward = total(stages)
    return Cost(
        2.0 * forward.matmul_flops - constant_products,
        2.0 * forward.other_flops,
        2.0 * forward.bytes,
    )
