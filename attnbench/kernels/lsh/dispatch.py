"""YOSO's numba kernels called on torch tensors: picks the CPU or CUDA kernel by the
tensor's device, allocates every output and scratch table through torch (so peak-memory
counters see them) and hands zero-copy views to numba.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numba
import torch

from attnbench.kernels.lsh import cpu, reference
from attnbench.kernels.lsh.checks import check_devices, require
from attnbench.kernels.lsh.core import MAX_PADDED_DIM, hash_chunk
from attnbench.kernels.target import as_array, contiguous, kernel_target

SMALL_TABLES = 256 * 2**20
# Bytes of tables the CUDA kernels fill at once (all groups together).
CUDA_TABLE_BUDGET = 64 * 2**20

# pair_cumulation's weights: eq. 4's lower bound, or the exact derivative's ratio (*YOSO).
PAIR_WEIGHTS = ("lower", "exact")

# free_bytes(device) -> bytes a new allocation may still take there; the caller's measure of
# memory (kernels know nothing of how it is read), None to allocate without asking.
FreeBytes = Callable[[str], int] | None


class TableTooLarge(MemoryError):
    """The 2^tau-bucket hash tables do not fit in the free memory."""


def hash_codes(x: torch.Tensor, draws: torch.Tensor, kind: str, tau: int, m: int):
    """Codes int32 [G, n, m] of x [G, n, d] by the Gaussian (draws = projections) or the
    fast Hadamard hash (draws = +-1 diagonals)."""
    target = kernel_target(x)
    if kind == "fast" and target != "cpu":
        require(
            draws.shape[-1] <= MAX_PADDED_DIM,
            f"hash=fast on CUDA supports d <= {MAX_PADDED_DIM}; use hash=gaussian",
        )
    check_devices(x.device, draws=draws)
    out = torch.empty(x.shape[0], x.shape[1], m, dtype=torch.int32, device=x.device)
    kernels = _kernels(target)
    fn = kernels.fast_codes if kind == "fast" else kernels.gaussian_codes
    fn(as_array(contiguous(x)), as_array(contiguous(draws)), tau, as_array(out))
    return out


def _kernels(target: str):
    """The CPU kernels, or the CUDA ones (on a GPU and under the simulator), whose module
    imports numba.cuda and so is imported only when needed."""
    if target == "cpu":
        return cpu
    from attnbench.kernels.lsh import cuda

    return cuda


@dataclass(frozen=True)
class Kernels:
    """The two cumulations as `LSHCumulation` calls them (the `ops` it is given), with the
    caller's way of reading free memory passed down to the table checks."""

    free_bytes: FreeBytes = None

    def cumulation(self, read_codes, write_codes, values, tau: int) -> torch.Tensor:
        return cumulation(read_codes, write_codes, values, tau, self.free_bytes)

    def weighted_cumulation(self, read_codes, write_codes, weights, vectors, read_weights, tau):
        return weighted_cumulation(
            read_codes, write_codes, weights, vectors, read_weights, tau, self.free_bytes
        )

    def scaled_cumulation(self, read_codes, write_codes, values, write_scale, read_scale, tau):
        return scaled_cumulation(
            read_codes, write_codes, values, write_scale, read_scale, tau, self.free_bytes
        )

    def pair_cumulation(
        self, read_codes, write_codes, read_unit, write_unit, read_a, write_a, tau, weight, bound
    ):
        return pair_cumulation(
            read_codes, write_codes, read_unit, write_unit, read_a, write_a, tau, weight, bound
        )

    def normalise_rows(self, y: torch.Tensor, eps: float) -> torch.Tensor:
        return normalise_rows(y, eps)

    def off_the_row(self, g, x, x_norm=None, divisor=None, out=None) -> torch.Tensor:
        return off_the_row(g, x, x_norm, divisor, out)


def normalise_rows(y: torch.Tensor, eps: float) -> torch.Tensor:
    """y (fp32, contiguous) divided by its rows' l2 norms in place; the norms [..., 1],
    each at least eps. One numba pass on the CPU; torch's two on a GPU."""
    if kernel_target(y) != "cpu" or y.dtype != torch.float32 or not y.is_contiguous():
        return reference.normalise_rows(y, eps)
    norms = torch.empty(*y.shape[:-1], 1, dtype=torch.float32)
    cpu.normalise_rows(as_array(y).reshape(-1, y.shape[-1]), eps, as_array(norms).reshape(-1))
    return norms


def off_the_row(g, x, x_norm=None, divisor=None, out=None) -> torch.Tensor:
    """reference.off_the_row: one numba pass a row on the CPU (fp32, contiguous rows),
    torch's batched product and update elsewhere."""
    tensors = [t for t in (g, x, x_norm, divisor, out) if t is not None]
    plain = all(t.dtype == torch.float32 and t.is_contiguous() for t in tensors)
    if kernel_target(g) != "cpu" or not plain:
        return reference.off_the_row(g, x, x_norm, divisor, out)
    if out is None:
        out = torch.empty_like(g)
    cols = g.shape[-1]
    none = torch.empty(0, dtype=torch.float32)
    x_norms, divisors = (none if t is None else t.reshape(-1) for t in (x_norm, divisor))
    rows = [as_array(t).reshape(-1, cols) for t in (g, x)]
    cpu.off_the_row(*rows, as_array(x_norms), as_array(divisors), as_array(out).reshape(-1, cols))
    return out


def cumulation(read_codes, write_codes, values, tau: int, free_bytes: FreeBytes = None):
    """(1/m) sum over hashes of the values of the write rows sharing each read row's bucket."""
    groups, n_r, m = read_codes.shape
    check_devices(values.device, read_codes=read_codes, write_codes=write_codes)
    out = torch.empty(groups, n_r, values.shape[-1], dtype=torch.float32, device=values.device)
    args = [as_array(contiguous(c, torch.int32)) for c in (read_codes, write_codes)]
    args.append(as_array(contiguous(values)))
    target = kernel_target(values)
    if target == "cpu":
        need = _cpu_table_bytes(write_codes.shape[1], m, tau, values.shape[-1], n_r)
        _check_tables(tau, need, "cpu", free_bytes)
        cpu.cumulation(*args, tau, as_array(out))
    else:
        table = _scratch(groups, m, tau, values.shape[-1], values.device, free_bytes)
        _kernels(target).cumulation(*args, tau, as_array(out), as_array(table))
    return out


def weighted_cumulation(
    read_codes, write_codes, weights, vectors, read_weights, tau: int, free_bytes: FreeBytes = None
):
    """(1/m) sum over hashes and write rows w in r's bucket of <rw_r, weights_w> vectors_w."""
    groups, n_r, m = read_codes.shape
    check_devices(
        vectors.device,
        read_codes=read_codes,
        write_codes=write_codes,
        weights=weights,
        read_weights=read_weights,
    )
    out = torch.empty(groups, n_r, vectors.shape[-1], dtype=torch.float32, device=vectors.device)
    args = [as_array(contiguous(c, torch.int32)) for c in (read_codes, write_codes)]
    args += [as_array(contiguous(t)) for t in (weights, vectors, read_weights)]
    target = kernel_target(vectors)
    if target == "cpu":  # sorts rows by code: O(n) memory, no 2^tau tables
        cpu.weighted_cumulation(*args, tau, as_array(out))
    else:
        table = _scratch(groups, m, tau, vectors.shape[-1], vectors.device, free_bytes)
        _kernels(target).weighted_cumulation(*args, tau, as_array(out), as_array(table))
    return out


def scaled_cumulation(
    read_codes, write_codes, values, write_scale, read_scale, tau: int, free_bytes: FreeBytes = None
):
    """(1/m) sum over hashes of read_scale times the write_scale-weighted values of the write
    rows sharing each read row's bucket (reference.scaled_cumulation)."""
    groups, n_r, m = read_codes.shape
    check_devices(
        values.device,
        read_codes=read_codes,
        write_codes=write_codes,
        write_scale=write_scale,
        read_scale=read_scale,
    )
    out = torch.empty(groups, n_r, values.shape[-1], dtype=torch.float32, device=values.device)
    args = [as_array(contiguous(c, torch.int32)) for c in (read_codes, write_codes)]
    args += [as_array(contiguous(t)) for t in (values, write_scale, read_scale)]
    target = kernel_target(values)
    if target == "cpu":
        need = _cpu_table_bytes(write_codes.shape[1], m, tau, values.shape[-1], n_r)
        _check_tables(tau, need, "cpu", free_bytes)
        cpu.scaled_cumulation(*args, tau, as_array(out))
    else:
        table = _scratch(groups, m, tau, values.shape[-1], values.device, free_bytes)
        _kernels(target).scaled_cumulation(*args, tau, as_array(out), as_array(table))
    return out


def pair_cumulation(
    read_codes, write_codes, read_unit, write_unit, read_a, write_a, tau: int, weight: str, bound
):
    """Sum over colliding pairs of phi(x) <read_a, write_a> write_unit, phi = tau/2 ("lower",
    eq. 4) or *YOSO's ratio ("exact", eq. 3), at most `bound` write rows per read row and
    hash (reference.pair_cumulation). Sorts each hash's write codes once, on the device."""
    if weight not in PAIR_WEIGHTS:
        raise ValueError(f"weight must be one of {', '.join(PAIR_WEIGHTS)}, got {weight!r}")
    check_devices(
        write_unit.device,
        read_codes=read_codes,
        write_codes=write_codes,
        read_unit=read_unit,
        read_a=read_a,
        write_a=write_a,
    )
    sorted_codes, order = torch.sort(write_codes.transpose(1, 2).contiguous(), dim=-1, stable=True)
    out = torch.empty(*read_codes.shape[:2], write_unit.shape[-1], device=write_unit.device)
    args = [as_array(contiguous(c, torch.int32)) for c in (read_codes, sorted_codes, order)]
    args += [as_array(contiguous(t)) for t in (read_unit, write_unit, read_a, write_a)]
    kernels = _kernels(kernel_target(write_unit))
    kernels.pair_cumulation(*args, tau, PAIR_WEIGHTS.index(weight), int(bound), as_array(out))
    return out


def _cpu_table_bytes(n_w: int, m: int, tau: int, width: int, n_r: int | None = None) -> int:
    """What the CPU cumulation's workers allocate: tables unless tau is large for n (then it
    sorts rows by code instead)."""
    if (1 << tau) > cpu.SPARSE_BUCKETS * n_w:
        return 0
    width = min(cpu.MAX_WIDTH, width)
    chunk = cpu.table_chunk(n_w, n_w if n_r is None else n_r, m, tau, width)
    return numba.get_num_threads() * chunk * ((1 << tau) + 2) * width * 4


def cuda_chunk(groups: int, m: int, tau: int, width: int) -> int:
    """Hashes whose tables the CUDA kernels fill at once: [G, chunk, 2^tau, width]."""
    return hash_chunk(m, tau, groups * width, budget=CUDA_TABLE_BUDGET)


def resident_bytes(target: str, groups: int, n: int, m: int, tau: int, width: int, weighted: bool):
    """Bytes a cumulation of `width` columns (`weighted`: weighted_cumulation's) over n rows
    keeps resident on kernel `target`: on CUDA its scratch tables; on the CPU every worker's
    tables, or where it sorts rows by code instead, every worker's sort buffers and bucket
    table. A size for cost models; nothing is allocated."""
    if target != "cpu":
        return groups * cuda_chunk(groups, m, tau, width) * (1 << tau) * width * 4
    tables = 0 if weighted else _cpu_table_bytes(n, m, tau, width)
    if tables:
        return tables
    per_worker = 8 * n + (1 << cpu.RADIX_BITS) + 1 + cpu.BUCKET_FLOATS
    return numba.get_num_threads() * per_worker * 4


def _scratch(groups: int, m: int, tau: int, width: int, device, free_bytes: FreeBytes):
    """The CUDA kernels' tables [G, chunk, 2^tau, width], chunk hashes at a time."""
    chunk = cuda_chunk(groups, m, tau, width)
    _check_tables(tau, groups * chunk * (2**tau) * width * 4, str(device), free_bytes)
    return torch.empty(groups, chunk, 2**tau, width, dtype=torch.float32, device=device)


def _check_tables(tau: int, need: int, device: str, free_bytes: FreeBytes) -> None:
    """Refuse, with the reason, tables that cannot fit rather than fail deep in a kernel.

    Tables under 256 MiB are not checked: asking the OS for free memory on every call
    would put file reads on the hot path for the common small-tau case."""
    if need < SMALL_TABLES or free_bytes is None:
        return
    free = free_bytes(device)
    if need > free:
        raise TableTooLarge(
            f"tau={tau} needs {need / 2**30:.1f} GiB of hash tables, {free / 2**30:.1f} GiB "
            "free; lower tau"
        )
