"""The efficiency study (YOSO Fig. 7, SCRAM Fig. 4): runtime and peak memory vs length.

One case is one backend at one length. Inputs are made once per length, outside every
timed region, and shared by all backends; each case yields its rows as soon as it ends.
Most backends take the same time on any inputs; a searching one (scram) does not, since
PatchMatch stops retrying lists that have settled, which happens early on a coherent image
and late on random vectors: `inputs` picks what to time on.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial

import torch

from attnbench.backends import Backend
from attnbench.inputs import Inputs
from attnbench.measure import is_cuda
from attnbench.measure.memory import available_bytes, peak_memory
from attnbench.measure.timing import time_call
from attnbench.results import Row

MODES = ("fwd", "bwd", "fwdbwd")
MIB = 1024 * 1024
HEADROOM = 0.8  # a case may use at most this share of the free memory


@dataclass
class TimeSpec:
    seqs: list[int]
    backends: list[Backend]
    batch: int = 1
    heads: int = 4
    dim: int = 64
    dtype: torch.dtype = torch.float32
    device: str = "cpu"
    mode: str = "fwd"
    repeats: int = 10
    warmup: int = 10
    seed: int = 0
    grids: list[tuple[int, int]] | None = None  # images H x W instead of 1-D sequences
    inputs: Inputs | None = None  # None: random; a file's shape sets batch, heads and dim

    def __post_init__(self):
        if self.grids:
            self.seqs = [h * w for h, w in self.grids]
        if self.inputs is None:
            self.inputs = Inputs("random", self.batch, self.heads, self.dim)
        elif self.inputs.data is not None:
            self.batch, self.heads, self.dim = self.inputs.batch, self.inputs.heads, self.inputs.dim

    def layouts(self) -> list[tuple[int, tuple[int, int] | None]]:
        """(n, grid) of every length: grid None for a 1-D sequence."""
        return list(zip(self.seqs, self.grids or [None] * len(self.seqs), strict=True))

    @property
    def cases(self) -> int:
        return len(self.seqs) * len(self.backends)


def run_time(
    spec: TimeSpec, on_case: Callable[[str], None] = lambda _: None
) -> Iterator[list[Row]]:
    """Yield the rows of each finished case, one case at a time."""
    for n, grid in spec.layouts():
        qkv = None
        for backend in spec.backends:
            on_case(f"{backend.spec} n={n}" + (f" ({grid[0]}x{grid[1]})" if grid else ""))
            row = partial(_row, spec, backend, n, grid)
            reason = _skip_reason(spec, backend, n)
            if reason:
                yield [row("time_ms", unit="ms", status="skipped", reason=reason)]
                continue
            if qkv is None:
                qkv = _make_inputs(spec, n, grid)
            try:
                call = _timed_call(partial(backend, grid=grid), qkv, spec.mode)
                timing = time_call(call, spec.device, spec.repeats, spec.warmup, min_time_s=0)
                memory = peak_memory(call, spec.device)
            except (torch.OutOfMemoryError, MemoryError) as exc:
                _release(spec.device)
                yield [row("time_ms", unit="ms", status="oom", reason=_one_line(exc))]
                continue
            except Exception as exc:  # noqa: BLE001 - record it and go on with the sweep
                _release(spec.device)
                yield [
                    row(
                        "time_ms",
                        unit="ms",
                        status="error",
                        reason=f"{type(exc).__name__}: {_one_line(exc)}",
                    )
                ]
                continue
            note = "" if timing.settled else "warm-up did not settle within the cap"
            yield [
                row(
                    "time_ms",
                    value=timing.median,
                    unit="ms",
                    p10=timing.p10,
                    p90=timing.p90,
                    count=len(timing.samples_ms),
                    reason=note,
                    samples=" ".join(f"{s:.6g}" for s in timing.samples_ms),
                ),
                row("first_call_ms", value=timing.first_call_ms, unit="ms", count=1),
                row(
                    "peak_mib",
                    value=memory.bytes / MIB,
                    unit="MiB",
                    count=1,
                    reason=f"method={memory.method}",
                ),
            ]


def _make_inputs(spec: TimeSpec, n: int, grid) -> list[torch.Tensor]:
    """q, k, v of one length; an image (one picture) is repeated over batch and heads."""
    qkv = spec.inputs.make(n, spec.seed, spec.dtype, spec.device, grid)
    if spec.inputs.on_grid:
        qkv = [t.expand(spec.batch, spec.heads, -1, -1).contiguous() for t in qkv]
    return qkv


def _row(spec: TimeSpec, backend: Backend, n: int, grid, metric: str, **fields) -> Row:
    return Row(
        study="time",
        backend=backend.spec,
        impl=backend.impl(spec.device),
        device=spec.device,
        dtype=str(spec.dtype).removeprefix("torch."),
        mode=spec.mode,
        inputs=spec.inputs.label if grid is None else f"{spec.inputs.label} {grid[0]}x{grid[1]}",
        batch=spec.batch,
        heads=spec.heads,
        seq=n,
        dim=spec.dim,
        metric=metric,
        **fields,
    )


def _skip_reason(spec: TimeSpec, backend: Backend, n: int) -> str:
    device_kind = "cuda" if is_cuda(spec.device) else spec.device
    if device_kind not in backend.devices:
        return f"{backend.name} does not run on {spec.device}"
    if spec.mode != "fwd" and not backend.backward:
        return f"{backend.name} has no backward pass"
    itemsize = torch.empty((), dtype=spec.dtype).element_size()
    need = backend.predicted_bytes(spec.batch, spec.heads, n, spec.dim, itemsize)
    free = available_bytes(spec.device)
    if need > HEADROOM * free:
        return f"needs ~{need / 2**30:.1f} GiB, {free / 2**30:.1f} GiB free"
    return ""


def _timed_call(backend: Callable, qkv: list[torch.Tensor], mode: str) -> Callable[[], object]:
    """The zero-argument call to time; anything it needs is prepared here, untimed."""
    if mode == "fwd":

        def forward():
            with torch.no_grad():
                return backend(*qkv)

        return forward

    leaves = [t.detach().requires_grad_(True) for t in qkv]
    shape = backend(*leaves).shape
    grad_out = torch.randn(shape, generator=torch.Generator().manual_seed(0)).to(qkv[0])

    def clear_grads():
        for t in leaves:
            t.grad = None

    if mode == "bwd":
        out = backend(*leaves)

        def backward():
            clear_grads()
            out.backward(grad_out, retain_graph=True)

        return backward

    def forward_backward():
        clear_grads()
        backend(*leaves).backward(grad_out)

    return forward_backward


def _release(device: str) -> None:
    if is_cuda(device):
        torch.cuda.empty_cache()


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__
