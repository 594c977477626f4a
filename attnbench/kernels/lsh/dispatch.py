"""YOSO's numba kernels called on torch tensors: picks the CPU or CUDA kernel by the
tensor's device, allocates every output and scratch table through torch (so peak-memory
counters see them) and hands zero-copy views to numba.
"""

from __future__ import annotations

import numba
import torch

from attnbench.kernels.lsh.core import MAX_PADDED_DIM, hash_chunk
from attnbench.kernels.target import as_array, contiguous, kernel_module, kernel_target
from attnbench.measure.memory import available_bytes

SMALL_TABLES = 256 * 2**20


class TableTooLarge(MemoryError):
    """The 2^tau-bucket hash tables do not fit in the free memory."""


def hash_codes(x: torch.Tensor, draws: torch.Tensor, kind: str, tau: int, m: int):
    """Codes int32 [G, n, m] of x [G, n, d] by the Gaussian (draws = projections) or the
    fast Hadamard hash (draws = +-1 diagonals)."""
    target = kernel_target(x)
    if kind == "fast" and target != "cpu" and draws.shape[-1] > MAX_PADDED_DIM:
        raise ValueError(f"hash=fast on CUDA supports d <= {MAX_PADDED_DIM}; use hash=gaussian")
    out = torch.empty(x.shape[0], x.shape[1], m, dtype=torch.int32, device=x.device)
    kernels = kernel_module("lsh", target)
    fn = kernels.fast_codes if kind == "fast" else kernels.gaussian_codes
    fn(as_array(contiguous(x)), as_array(contiguous(draws.to(x.device))), tau, as_array(out))
    return out


def cumulation(read_codes, write_codes, values, tau: int) -> torch.Tensor:
    """(1/m) sum over hashes of the values of the write rows sharing each read row's bucket."""
    groups, n_r, m = read_codes.shape
    out = torch.empty(groups, n_r, values.shape[-1], dtype=torch.float32, device=values.device)
    args = [as_array(contiguous(c, torch.int32)) for c in (read_codes, write_codes)]
    args.append(as_array(contiguous(values)))
    target = kernel_target(values)
    if target == "cpu":
        _check_tables(tau, _cpu_table_bytes(write_codes.shape[1], m, tau, values.shape[-1]))
        kernel_module("lsh", target).cumulation(*args, tau, as_array(out))
    else:
        table = _scratch(groups, m, tau, values.shape[-1], values.device)
        kernel_module("lsh", target).cumulation(*args, tau, as_array(out), as_array(table))
    return out


def weighted_cumulation(read_codes, write_codes, weights, vectors, read_weights, tau: int):
    """(1/m) sum over hashes and write rows w in r's bucket of <rw_r, weights_w> vectors_w."""
    groups, n_r, m = read_codes.shape
    out = torch.empty(groups, n_r, vectors.shape[-1], dtype=torch.float32, device=vectors.device)
    args = [as_array(contiguous(c, torch.int32)) for c in (read_codes, write_codes)]
    args += [as_array(contiguous(t)) for t in (weights, vectors, read_weights)]
    target = kernel_target(vectors)
    if target == "cpu":  # sorts rows by code: O(n) memory, no 2^tau tables
        kernel_module("lsh", target).weighted_cumulation(*args, tau, as_array(out))
    else:
        table = _scratch(groups, m, tau, vectors.shape[-1], vectors.device)
        kernel_module("lsh", target).weighted_cumulation(*args, tau, as_array(out), as_array(table))
    return out


def _cpu_table_bytes(n_w: int, m: int, tau: int, width: int) -> int:
    """What the CPU cumulation's workers allocate: tables unless tau is large for n (then it
    sorts rows by code instead)."""
    from attnbench.kernels.lsh import cpu

    if (1 << tau) > cpu.SPARSE_BUCKETS * n_w:
        return 0
    width = min(cpu.MAX_WIDTH, width)
    return numba.get_num_threads() * hash_chunk(m, tau, width) * ((1 << tau) + 2) * width * 4


def _scratch(groups: int, m: int, tau: int, width: int, device) -> torch.Tensor:
    """The CUDA kernels' tables [G, chunk, 2^tau, width], chunk hashes at a time."""
    chunk = hash_chunk(m, tau, groups * width, budget=64 * 2**20)
    _check_tables(tau, groups * chunk * (2**tau) * width * 4, device)
    return torch.empty(groups, chunk, 2**tau, width, dtype=torch.float32, device=device)


def _check_tables(tau: int, need: int, device="cpu") -> None:
    """Refuse, with the reason, tables that cannot fit rather than fail deep in a kernel.

    Tables under 256 MiB are not checked: asking the OS for free memory on every call
    would put file reads on the hot path for the common small-tau case."""
    if need < SMALL_TABLES:
        return
    free = available_bytes(str(device))
    if need > free:
        raise TableTooLarge(
            f"tau={tau} needs {need / 2**30:.1f} GiB of hash tables, {free / 2**30:.1f} GiB "
            "free; lower tau"
        )
