"""selftest's numeric checks: the numba kernels and every backend against plain-torch
references on the target device.

- hash codes of the numba kernels against the torch reference's on the CPU, from the same
  draws: the fast hash bit-exact, the Gaussian hash's flipped bits counted (a projection
  within rounding of zero may fall either side once FMA or another summation order is used);
- YOSO forward, both impls, against its dense definition (the l2-normalised product of the
  collision frequencies and V), and every `backward=` of the kernels against impl=torch's;
- SCRAM whose windows cover every key against dense softmax;
- every registered backend in each float type against itself in float64 on the same
  rounded inputs and the same draws.
Errors are max |out - ref| / max |ref|: scale-free, and a broken path gives order one.
"""

from __future__ import annotations

import math
import time
from dataclasses import replace

import torch
import torch.nn.functional as F

from attnbench.backends.registry import backend_classes, get_backend
from attnbench.kernels.lsh import dispatch, reference
from attnbench.kernels.lsh.autograd import BACKWARDS
from attnbench.studies.selftest.target import Check, Target, measured, skipped

SCRAM_HEIGHT = 4  # rows of SCRAM's grid: kappa = n keys must stay within its kappa limit
FP32 = 1e-4  # float32 kernels against float32 or float64 references of the same sums
# Each float type against float64: its rounding of inputs and outputs, grown through a
# softmax or a normalisation; a wrong kernel is off by order one.
AGAINST_FLOAT64 = {"float32": 1e-4, "bfloat16": 6e-2, "float16": 1e-2}
GAUSSIAN_FLIPS = 1e-3  # share of Gaussian code bits allowed to flip against the reference


def relative_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    """max |out - ref| / max |ref| in float64 on the CPU (NaN anywhere gives NaN)."""
    out, ref = out.detach().double().cpu(), ref.detach().double().cpu()
    scale = ref.abs().max().item() if ref.numel() else 0.0
    diff = (out - ref).abs().max().item() if ref.numel() else 0.0
    if math.isnan(diff) or math.isnan(scale):
        return math.nan
    return diff / max(scale, 1e-30)


def inputs(target: Target, dtype: str = "float32", seed: int = 0):
    """q, k, v [B, H, n, d|d_v] ~ N(0, 1), drawn on the CPU and rounded to `dtype` on the
    device, so every check sees the same values whatever the device."""
    s = target.sizes
    gen = torch.Generator().manual_seed(seed)
    shapes = [(s.batch, s.heads, s.n, s.d)] * 2 + [(s.batch, s.heads, s.n, s.dv)]
    return [
        torch.randn(shape, generator=gen).to(target.device, getattr(torch, dtype))
        for shape in shapes
    ]


def groups(target: Target) -> list[tuple[str, object]]:
    """(name, check) pairs: the kernels everywhere; the backends' torch paths on a device
    whose torch ops are real (the simulator runs numba's kernels only)."""
    found = [
        ("hash codes", lambda: hash_checks(target)),
        ("yoso kernels", lambda: yoso_checks(target)),
        ("scram kernels", lambda: scram_checks(target)),
    ]
    if target.simulated:
        reason = "the simulator runs numba's CUDA kernels only; --device cpu checks torch's"
        found.append(("backends", lambda: [skipped("backends in every float type", reason)]))
    else:
        found.append(("backends", lambda: backend_checks(target)))
    return found


def warm_up(target: Target) -> float | None:
    """Seconds numba takes to compile (or load from its cache) every kernel the checks
    call: the kernel checks run once, their rows dropped. None under the simulator, which
    compiles nothing."""
    if target.simulated:
        return None
    start = time.perf_counter()
    for check in (hash_checks, yoso_checks, scram_checks):
        try:
            check(target)
        except Exception:  # noqa: BLE001, S112 - the checks themselves report it
            continue
    return time.perf_counter() - start


def _bit_flips(a: torch.Tensor, b: torch.Tensor, tau: int) -> int:
    diff = (a.cpu() ^ b.cpu()).to(torch.int64)
    return int(sum(((diff >> t) & 1).sum().item() for t in range(tau)))


def hash_checks(target: Target) -> list[Check]:
    s = target.sizes
    groups = s.batch * s.heads
    gen = torch.Generator().manual_seed(5)
    x = torch.randn(groups, s.n, s.d, generator=gen)
    rows = []
    for kind in ("fast", "gaussian"):
        draw = reference.fast_diagonals if kind == "fast" else reference.gaussian_projections
        draws = draw(groups, s.d, s.m, s.tau, seed=1, device=target.device)
        codes = dispatch.hash_codes(x.to(target.device), draws, kind, s.tau, s.m)
        if kind == "fast":
            ref = reference.fast_codes(x, draws.cpu(), s.tau, s.m)
        else:
            ref = reference.gaussian_codes(x, draws.cpu(), s.tau)
        flips, bits = _bit_flips(codes, ref, s.tau), codes.numel() * s.tau
        name = f"hash={kind} codes: numba-{target.kernels} vs torch on the CPU"
        detail = f"{flips} of {bits} code bits differ"
        if kind == "fast":
            rows.append(measured(name, flips, 0, detail + " (must be bit-exact)"))
        else:
            rows.append(measured(name, flips / bits, GAUSSIAN_FLIPS, detail))
    return rows


def _yoso_spec(target: Target, hash_: str) -> str:
    s = target.sizes
    return f"yoso:m={s.m},tau={s.tau},seed=3,hash={hash_},bound={s.bound}"


def _gradients(spec: str, target: Target) -> list[torch.Tensor]:
    leaves = [t.requires_grad_(True) for t in inputs(target)]
    out = get_backend(spec)(*leaves)
    gen = torch.Generator().manual_seed(7)
    out.backward(torch.randn(out.shape, generator=gen).to(out.device))
    return [t.grad for t in leaves]


def _worst(pairs) -> float:
    return max(relative_error(a, b) for a, b in pairs)


def yoso_checks(target: Target) -> list[Check]:
    rows = []
    q, k, v = inputs(target)
    definition = "vs the dense definition: normalised (collision frequencies x V)"
    for hash_ in ("fast", "gaussian"):
        for impl in ("torch", "numba"):
            backend = get_backend(_yoso_spec(target, hash_) + f",impl={impl}")
            out = backend(q, k, v)
            dense = F.normalize(backend.attention_map(q, k) @ v, dim=-1)
            name = f"yoso hash={hash_} {backend.impl(target.device)} forward"
            rows.append(measured(name, relative_error(out, dense), FP32, definition))
    spec = _yoso_spec(target, "gaussian")
    linear, dense = (
        _gradients(f"{spec},impl=torch,backward={b}", target) for b in ("lsh", "dense")
    )
    rows.append(
        measured(
            "yoso backward=lsh torch gradients",
            _worst(zip(linear, dense, strict=True)),
            FP32,
            "vs backward=dense (the same codes, the n x n matrix built)",
        )
    )
    impl = get_backend(spec).impl(target.device)
    for backward in BACKWARDS:
        ours = _gradients(f"{spec},backward={backward}", target)
        ref = _gradients(f"{spec},impl=torch,backward={backward}", target)
        name = f"yoso backward={backward} {impl} gradients"
        detail = "dQ, dK, dV vs impl=torch's (the same codes and signs)"
        rows.append(measured(name, _worst(zip(ours, ref, strict=True)), FP32, detail))
    return rows


def scram_checks(target: Target) -> list[Check]:
    """PatchMatch and the window softmax: with kappa = n every key is a match, so SCRAM is
    dense softmax whatever PatchMatch's random search found."""
    s = replace(target.sizes, height=min(target.sizes.height, SCRAM_HEIGHT))
    target = replace(target, sizes=s)
    q, k, v = inputs(target)
    backend = get_backend(f"scram:kappa={s.n},b=0")
    out = backend(q, k, v, grid=(s.height, s.width))
    scores = q.double() @ k.double().transpose(-1, -2) / math.sqrt(s.d)
    dense = torch.softmax(scores, dim=-1) @ v.double()
    name = f"scram kappa=n {backend.impl(target.device)} forward"
    return [measured(name, relative_error(out, dense), FP32, "vs dense softmax")]


def backend_checks(target: Target) -> list[Check]:
    s = target.sizes
    rows = []
    for name, cls in sorted(backend_classes().items()):
        for dtype in target.dtypes:
            row = f"{name} {dtype}"
            if target.device not in cls.devices:
                rows.append(skipped(row, f"{name} does not run on {target.device}"))
                continue
            try:
                q, k, v = inputs(target, dtype, seed=11)
                grid = (s.height, s.width)
                out = get_backend(name)(q, k, v, grid=grid)
                ref = get_backend(name)(q.double(), k.double(), v.double(), grid=grid)
            except Exception as exc:  # noqa: BLE001 - a failing backend is a failed row
                rows.append(Check(row, "fail", detail=f"{type(exc).__name__}: {exc}"))
                continue
            error = relative_error(out, ref)
            detail = "vs itself in float64, same inputs and draws"
            if out.dtype != getattr(torch, dtype):
                rows.append(Check(row, "fail", error, None, f"returned {out.dtype}"))
                continue
            rows.append(measured(row, error, AGAINST_FLOAT64[dtype], detail))
    return rows
