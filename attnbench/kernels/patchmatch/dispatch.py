"""SCRAM's numba kernels called on torch tensors: picks the CPU or CUDA kernels by the
tensors' device (`kernel_target`), allocates outputs and scratch through torch (so memory
counters see them) and hands zero-copy views to numba.

PatchMatch marks its stages through the caller's `stage` callable: on the CPU each pass
(`CPU_STAGES`), on CUDA the one cooperative launch (`CUDA_STAGES`), which a launch per pass
would make slower; `patchmatch_stages` says which for a device.
"""

from __future__ import annotations

import torch

from attnbench.kernels.patchmatch import cpu
from attnbench.kernels.target import as_array, contiguous, device_target, kernel_target

# The stages PatchMatch marks: each pass on the CPU; on CUDA the whole search, one launch.
CPU_STAGES = cpu.STAGES
CUDA_STAGES = ("patchmatch",)


def _kernels(target: str):
    """The CPU kernels, or the CUDA ones (on a GPU and under the simulator), whose module
    imports numba.cuda and so is imported only when needed."""
    if target == "cpu":
        return cpu
    from attnbench.kernels.patchmatch import cuda

    return cuda


def patchmatch_stages(device) -> tuple[str, ...]:
    """The stages `patchmatch` marks for tensors on `device` (CUDA's under the simulator)."""
    return CPU_STAGES if device_target(device) == "cpu" else CUDA_STAGES


def _validity(valid: torch.Tensor | None, q: torch.Tensor):
    """A bool [B, n] key mask as the kernels' uint8 array (None stays None)."""
    if valid is None:
        return None
    if tuple(valid.shape) != tuple(q.shape[:2]):
        raise ValueError(f"valid must be [B, n] like q {tuple(q.shape)}, got {tuple(valid.shape)}")
    return as_array(contiguous(valid.to(q.device), torch.uint8))


def patchmatch(
    q: torch.Tensor,
    k: torch.Tensor,
    H: int,
    W: int,
    kappa: int,
    variant: str = "max",
    L: int = 1,
    T: int = 8,
    jumps: tuple[int, ...] = (8, 4, 2, 1),
    seed: int = 0,
    valid: torch.Tensor | None = None,
    stage=None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Approximate top-kappa keys of every query (q, k [B, H*W, d], score <q, k>/sqrt(d)),
    among the keys that `valid` (bool [B, n], None = all) allows.

    Returns matches int32 [B, n, kappa] (linear key indices, best first; -1 where fewer
    than kappa were found: the mode variant, or masked keys) and their scores float32.
    stage: None, or a callable giving a context manager per stage name of
    `patchmatch_stages`; the setup of the lists counts as the first stage.
    """
    if q.dim() != 3:
        raise ValueError(f"q must be [B, n, d], got {tuple(q.shape)}")
    mark = cpu.no_stage if stage is None else stage
    target = kernel_target(q)
    if target == "cpu":
        with mark(CPU_STAGES[0]):
            matches, scores, arrays = _fields(q, k, kappa, valid)
        qa, ka, *fields, va = arrays
        cpu.patchmatch(
            qa, ka, H, W, kappa, variant, L, T, tuple(jumps), seed, *fields, va, stage=stage
        )
        return matches, scores
    with mark(CUDA_STAGES[0]):
        matches, scores, arrays = _fields(q, k, kappa, valid)
        qa, ka, *fields, va = arrays
        _kernels(target).patchmatch(
            qa, ka, H, W, kappa, variant, L, T, tuple(jumps), seed, *fields, va
        )
    return matches, scores


def _fields(q: torch.Tensor, k: torch.Tensor, kappa: int, valid: torch.Tensor | None):
    """The lists PatchMatch fills, matches int32 and scores float32 [B, n, kappa], and the
    kernels' arrays: q, k, both lists, their second buffers, `changed` [2, B*n] and the key
    validity (None for all keys)."""
    B, n = q.shape[0], q.shape[1]
    matches = torch.empty(B, n, kappa, dtype=torch.int32, device=q.device)
    scores = torch.empty(B, n, kappa, dtype=torch.float32, device=q.device)
    tmp_ids, tmp_sc = torch.empty_like(matches), torch.empty_like(scores)
    changed = torch.zeros(2, B * n, dtype=torch.int32, device=q.device)
    tensors = (contiguous(q), contiguous(k), matches, scores, tmp_ids, tmp_sc, changed)
    return matches, scores, [*(as_array(t) for t in tensors), _validity(valid, q)]


def window_softmax(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    matches: torch.Tensor,
    H: int,
    W: int,
    b: int,
    valid: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Softmax attention of each query over the union of the (2b+1)^2 windows (clipped, each
    key once, without keys that `valid` bool [B, n] marks False) around its matches
    [B, n, kappa]: out float32 [B, n, dv] (zero where no key is left) and the number of
    keys used int32 [B, n]."""
    if v.dim() != 3 or matches.dim() != 3:
        raise ValueError(f"v and matches must be 3-D, got {tuple(v.shape)}, {tuple(matches.shape)}")
    B, n, dv = v.shape
    if matches.numel() and (matches.max() >= H * W or matches.min() < -1):
        raise ValueError(f"matches must be key indices in [-1, {H * W})")
    out = torch.empty(B, n, dv, dtype=torch.float32, device=v.device)
    counts = torch.empty(B, n, dtype=torch.int32, device=v.device)
    args = [as_array(contiguous(t)) for t in (q, k, v)]
    args.append(as_array(contiguous(matches, torch.int32)))
    _kernels(kernel_target(q)).window_softmax(
        *args, H, W, b, as_array(out), as_array(counts), _validity(valid, q)
    )
    return out, counts
