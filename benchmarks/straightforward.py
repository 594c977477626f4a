"""Each new backend against the straightforward torch code of the same method: the acceptance
criterion is that no backend is slower than its plain version by more than MAX_RATIO.

    python benchmarks/straightforward.py --csv plots/field-straightforward-cpu.csv

The plain versions below are the obvious vectorised code a researcher would write from each
paper or its authors' released code: plain matmuls and softmax, gathers, Longformer's
overlapping-chunks sliding window, grouped conv2d in the default layout. YOSO-m itself runs as
numba kernels, so YOSO-C's plain version is our YOSO plus the convolution written the plain
way. Every plain version takes its random draws (projections, features, rotations, conv
weights) from the backend's own helpers, so it gives the backend's output
(tests/test_straightforward.py checks it at small n); where the backend draws anew on every
call, so does the plain version.

Timing is forward only, under no_grad as the `time` study times it, with the same steady
allocator, the backends' default parameters, B = 1, H = 4, d = 64, float32, no mask. Ours and
plain are timed in alternating blocks of samples (ABBA order), so drift of the host hits both
alike; each block's first call is not kept. The table gives medians with p10-p90 and the ratio
ours / plain, flagged above MAX_RATIO.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from functools import partial
from pathlib import Path

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F
import typer
from rich.console import Console
from rich.table import Table

from attnbench import get_backend
from attnbench.backends.nystromformer import conv_weights as nystrom_conv_weights
from attnbench.backends.reformer import layout
from attnbench.backends.yoso import YOSO
from attnbench.backends.yoso_c import conv_weights as yoso_c_conv_weights
from attnbench.inputs import random_qkv
from attnbench.measure.allocator import steady_allocator
from attnbench.measure.threads import set_threads
from attnbench.measure.timing import time_call
from attnbench.results.formats import atomic_write

app = typer.Typer(add_completion=False)

MAX_RATIO = 1.10  # ours / plain above this fails the acceptance criterion
# The backends as the time study runs them by default.
SPECS = {
    "nystromformer": "nystromformer:landmarks=64,conv=33",
    "linformer": "linformer:k=256",
    "performer": "performer:features=256",
    "reformer": "reformer:hashes=2,bucket=64",
    "longformer": "longformer:window=512",
    "yoso-c": "yoso-c-32",
}
# Every plain version cuts n evenly: 64 segments, chunks of 64, overlapping chunks of 512.
MULTIPLE = 512


# --- Nyströmformer (Xiong et al. 2021), as the authors' released code ----------------------


def iterative_inv(a: torch.Tensor, iterations: int = 6) -> torch.Tensor:
    """Moore-Penrose pseudo-inverse of A [..., m, m] by the paper's eq. (14)."""
    eye = torch.eye(a.shape[-1], dtype=a.dtype, device=a.device)
    norm_1 = a.abs().sum(-2).amax(-1)[..., None, None]
    norm_inf = a.abs().sum(-1).amax(-1)[..., None, None]
    z = a.transpose(-1, -2) / (norm_1 * norm_inf)
    for _ in range(iterations):
        az = a @ z
        z = 0.25 * z @ (13 * eye - az @ (15 * eye - az @ (7 * eye - az)))
    return z


def plain_nystromformer(q, k, v, landmarks: int, conv_weight: torch.Tensor) -> torch.Tensor:
    """softmax(Q K~^T) pinv(softmax(Q~ K~^T)) softmax(Q~ K^T) V + conv(V); conv_weight [H, c]."""
    b, h, n, d = q.shape
    q, k = q / d**0.25, k / d**0.25
    q_tilde = q.reshape(b, h, landmarks, n // landmarks, d).mean(-2)
    k_tilde = k.reshape(b, h, landmarks, n // landmarks, d).mean(-2)
    kernel_1 = torch.softmax(q @ k_tilde.transpose(-1, -2), -1)
    kernel_2 = torch.softmax(q_tilde @ k_tilde.transpose(-1, -2), -1)
    kernel_3 = torch.softmax(q_tilde @ k.transpose(-1, -2), -1)
    out = (kernel_1 @ iterative_inv(kernel_2)) @ (kernel_3 @ v)
    taps = conv_weight.shape[-1]
    kernel = conv_weight.to(v.dtype)[:, None, :, None]  # [H, 1, c, 1]: one kernel per head
    return out + F.conv2d(v, kernel, padding=(taps // 2, 0), groups=h)


# --- Linformer (Wang et al. 2020) -----------------------------------------------------------


def plain_linformer(q, k, v, e: torch.Tensor, f: torch.Tensor) -> torch.Tensor:
    """softmax(Q (E K)^T / sqrt(d)) (F V) with E, F [k, n]."""
    scores = q @ (e @ k).transpose(-1, -2) / math.sqrt(q.shape[-1])
    return torch.softmax(scores, -1) @ (f @ v)


# --- Performer's FAVOR+ (Choromanski et al. 2021), as the reference implementation ---------


def favor_features(x: torch.Tensor, w: torch.Tensor, is_query: bool) -> torch.Tensor:
    """phi(x) = exp(W x' - |x'|^2 / 2 - stabiliser) / sqrt(r), x' = x d^(-1/4); the stabiliser
    is the max of W x' over each query's features, or over all keys and features."""
    x = x * x.shape[-1] ** -0.25
    wx = x @ w.T
    half_norm = (x * x).sum(-1, keepdim=True) / 2
    stabiliser = wx.amax(-1, keepdim=True) if is_query else wx.amax((-2, -1), keepdim=True)
    return torch.exp(wx - half_norm - stabiliser) / math.sqrt(w.shape[0])


def plain_performer(q, k, v, w: torch.Tensor) -> torch.Tensor:
    """phi(Q) (phi(K)^T V) / phi(Q) (phi(K)^T 1) for the random features W [r, d]."""
    phi_q, phi_k = favor_features(q, w, True), favor_features(k, w, False)
    numerator = phi_q @ (phi_k.transpose(-1, -2) @ v)
    denominator = phi_q @ phi_k.sum(-2).unsqueeze(-1)
    return numerator / denominator


# --- Reformer's LSH attention (Kitaev et al. 2020), as trax's LSHSelfAttention -------------


def look_one_back(x: torch.Tensor) -> torch.Tensor:
    """Chunks [..., chunks, c, e] -> each chunk followed by its predecessor [..., chunks, 2c, e]."""
    return torch.cat([x, x.roll(1, dims=-3)], dim=-2)


def plain_reformer(q, v, rotations: torch.Tensor, bucket: int) -> torch.Tensor:
    """Shared-QK LSH attention; rotations [H, rounds, d, n_buckets / 2], n a multiple of bucket."""
    b, h, n, d = q.shape
    rounds, chunks = rotations.shape[1], n // bucket
    rotated = torch.einsum("bhnd,hrdk->bhrnk", q, rotations.to(q.dtype))
    buckets = torch.cat([rotated, -rotated], -1).argmax(-1)  # [B, H, rounds, n]
    ticker = torch.arange(n, device=q.device)
    sticker = (buckets * n + ticker).argsort(-1)  # sort by (bucket, position)
    undo_sort = sticker.argsort(-1)

    def sort(x):  # [B, H, n, e] -> [B, H, rounds, chunks, c, e] in sorted order
        x = x.unsqueeze(2).expand(-1, -1, rounds, -1, -1)
        index = sticker.unsqueeze(-1).expand_as(x)
        return x.gather(3, index).unflatten(3, (chunks, bucket))

    sq, sv = sort(q), sort(v)
    sk = look_one_back(F.normalize(sq, dim=-1))
    sv = look_one_back(sv)
    q_pos = sticker.unflatten(3, (chunks, bucket))
    k_pos = look_one_back(q_pos.unsqueeze(-1)).squeeze(-1)
    dots = sq @ sk.transpose(-1, -2) / math.sqrt(d)  # [B, H, rounds, chunks, c, 2c]
    dots = dots.masked_fill(q_pos.unsqueeze(-1) == k_pos.unsqueeze(-2), -1e5)  # not self
    logits = dots.logsumexp(-1, keepdim=True)
    bo = (torch.exp(dots - logits) @ sv).flatten(3, 4)  # [B, H, rounds, n, dv]
    o = bo.gather(3, undo_sort.unsqueeze(-1).expand_as(bo))
    logits = logits.flatten(3, 5).gather(3, undo_sort)  # [B, H, rounds, n]
    probs = torch.softmax(logits, dim=2).unsqueeze(-1)  # the rounds' weights
    return (o * probs).sum(2)


# --- Longformer (Beltagy et al. 2020), the authors' overlapping-chunks sliding window -------


def plain_longformer(q, k, v, window: int) -> torch.Tensor:
    """Sliding-window attention |i - j| <= w = window // 2 by Longformer's "sliding chunks":
    overlapping chunks of 2w tokens score all pairs, the band's diagonals are turned into
    columns [n, 2w + 1], softmax, then probabilities are diagonalised back against windows of
    3w values. Needs n a multiple of 2w."""
    b, h, n, d = q.shape
    w = window // 2
    q, k, v = (x.reshape(b * h, n, d) for x in (q / math.sqrt(d), k, v))

    def chunk(x):  # [G, n, d] -> overlapping chunks [G, n / w - 1, 2w, d], hop w
        return x.unfold(1, 2 * w, w).transpose(-1, -2)

    chunk_scores = chunk(q) @ chunk(k).transpose(-1, -2)  # [G, C, 2w, 2w]
    # pad one row and view as [2w, 2w + 1]: row x now holds the keys x .. x + 2w
    skewed = F.pad(chunk_scores, (0, 0, 0, 1)).view(*chunk_scores.shape[:2], 2 * w, 2 * w + 1)
    band = chunk_scores.new_zeros(b * h, n // w, w, 2 * w + 1)  # offsets -w .. w
    band[:, :-1, :, w:] = skewed[:, :, :w, : w + 1]  # the diagonal and above
    band[:, -1, :, w:] = skewed[:, -1, w:, : w + 1]
    band[:, 1:, :, :w] = skewed[:, :, -(w + 1) : -1, w + 1 :]  # below the diagonal
    band[:, 0, 1:w, 1:w] = skewed[:, 0, : w - 1, 1 - w :]
    band = band.view(b * h, n, 2 * w + 1)
    key = torch.arange(n, device=q.device)[:, None] + torch.arange(-w, w + 1, device=q.device)
    band = band.masked_fill((key < 0) | (key >= n), -math.inf)  # keys past either end
    probs = torch.softmax(band, -1).view(b * h, n // w, w, 2 * w + 1)

    # diagonalise: pad w + 1 columns, drop the flat tail, view as [w, 3w + 1]: row x shifts by x
    diagonal = F.pad(probs, (0, w + 1)).flatten(-2)[..., :-w].view(b * h, n // w, w, 3 * w + 1)
    values = F.pad(v, (0, 0, w, w)).unfold(1, 3 * w, w).transpose(-1, -2)  # [G, n / w, 3w, d]
    return (diagonal[..., :-1] @ values).reshape(b, h, n, d)


# --- YOSO-C: our YOSO-m plus the depthwise convolution written the plain way ---------------


def plain_yoso_c(yoso, q, k, v, conv_weight: torch.Tensor) -> torch.Tensor:
    """yoso(Q, K, V) + conv(V): the convolution as a grouped conv2d, one kernel per head."""
    taps = conv_weight.shape[-1]
    kernel = conv_weight.to(v.dtype)[:, None, :, None]
    return yoso(q, k, v) + F.conv2d(v, kernel, padding=(taps // 2, 0), groups=v.shape[1])


# --- timing ---------------------------------------------------------------------------------


def plain_call(ours, q, k, v) -> Callable[[], torch.Tensor]:
    """The plain version of backend `ours` on q, k, v as a zero-argument call, with the draws
    ours makes. Backends that redraw on every call (performer, reformer, yoso-c) get a twin
    instance that makes the plain version's next draw on each of its calls, so both pay for
    drawing."""
    h, n, d, device = q.shape[1], q.shape[2], q.shape[3], q.device
    values, calls = ours.values, itertools.count()
    twin = type(ours)(**values)
    if ours.name == "nystromformer":
        weight = nystrom_conv_weights(h, values["conv"], values["seed"]).to(device)
        return partial(plain_nystromformer, q, k, v, values["landmarks"], weight)
    if ours.name == "linformer":
        e, f = ours.projections(n, h, device, q.dtype)
        return partial(plain_linformer, q, k, v, e, f)
    if ours.name == "performer":
        return lambda: plain_performer(q, k, v, twin.projection(d, device, q.dtype, next(calls)))
    if ours.name == "reformer":
        n_buckets = layout(n, values["bucket"])[2]
        return lambda: plain_reformer(
            q, v, twin.rotations(h, d, n_buckets, device, next(calls)), values["bucket"]
        )
    if ours.name == "longformer":
        return partial(plain_longformer, q, k, v, values["window"])
    if ours.name == "yoso-c":
        yoso = YOSO(**{key: value for key, value in values.items() if key != "conv"})
        weight = yoso_c_conv_weights(h, values["conv"], values["seed"]).to(device)
        return partial(plain_yoso_c, yoso, q, k, v, weight)
    raise ValueError(f"no plain version of {ours.name}")


def no_grad(fn: Callable[[], object]) -> Callable[[], object]:
    """fn under torch.no_grad, as the time study times a forward pass."""

    def forward():
        with torch.no_grad():
            return fn()

    return forward


def interleaved(ours, plain, device: str, rounds: int, block: int) -> tuple[list, list]:
    """Samples (ms) of two calls timed in alternating blocks of `block` samples, ABBA order,
    after each has settled; each block's first call is a warm-up and is not kept."""
    for fn in (ours, plain):
        time_call(fn, device, 1, min_time_s=0)
    samples: dict[Callable, list[float]] = {ours: [], plain: []}
    for r in range(rounds):
        for fn in (ours, plain) if r % 2 == 0 else (plain, ours):
            samples[fn] += time_call(fn, device, block, 0, min_time_s=0).samples_ms
    return samples[ours], samples[plain]


def compare(name: str, n: int, heads: int, dim: int, device: str, rounds: int, block: int):
    q, k, v = (x.to(device) for x in random_qkv(1, heads, n, dim, seed=0))
    ours = get_backend(SPECS[name])
    plain = plain_call(ours, q, k, v)
    ours_ms, plain_ms = interleaved(
        no_grad(lambda: ours(q, k, v)), no_grad(plain), device, rounds, block
    )
    row = {"backend": name, "seq": n}
    for who, ms in (("ours", ours_ms), ("plain", plain_ms)):
        p10, median, p90 = np.percentile(ms, [10, 50, 90])
        row |= {f"{who}_ms": median, f"{who}_p10": p10, f"{who}_p90": p90}
    return row | {"ratio": row["ours_ms"] / row["plain_ms"]}


def _lengths(seq: list[int]) -> list[int]:
    for n in seq:
        if n < MULTIPLE or n % MULTIPLE:
            raise typer.BadParameter(f"{n} is not a positive multiple of {MULTIPLE}")
    return seq


@app.command()
def main(
    seq: list[int] = typer.Option([4096, 16384], callback=_lengths, help="sequence lengths"),
    backend: list[str] = typer.Option(list(SPECS), help="backends to compare"),
    heads: int = 4,
    dim: int = 64,
    rounds: int = typer.Option(6, min=1, help="blocks of samples per side, alternating"),
    block: int = typer.Option(5, min=1, help="samples per block"),
    device: str = "cpu",
    threads: int = typer.Option(None, min=1, help="CPU threads for torch and numba"),
    csv: Path = typer.Option(None, help="write the table here"),
) -> None:
    unknown = sorted(set(backend) - set(SPECS))
    if unknown:
        raise typer.BadParameter(f"{unknown}; valid: {', '.join(SPECS)}", param_hint="--backend")
    threads = set_threads(threads)
    steady_allocator()
    console = Console()
    records = []
    for n in seq:
        for name in backend:
            row = compare(name, n, heads, dim, device, rounds, block)
            records.append(row | {"device": device, "threads": threads})
            console.print(f"n={n} {name}: ours/plain {row['ratio']:.3f}")
    df = pd.DataFrame(records)
    table = Table("backend", "n", "ours ms (p10-p90)", "plain ms (p10-p90)", "ours/plain")
    for r in df.itertuples():
        flag = f"[red]{r.ratio:.2f} > {MAX_RATIO:.2f}[/red]" if r.ratio > MAX_RATIO else ""
        table.add_row(
            r.backend, str(r.seq),
            f"{r.ours_ms:.2f} ({r.ours_p10:.2f}-{r.ours_p90:.2f})",
            f"{r.plain_ms:.2f} ({r.plain_p10:.2f}-{r.plain_p90:.2f})",
            flag or f"{r.ratio:.2f}",
        )  # fmt: skip
    console.print(table)
    if csv:
        atomic_write(csv, df.to_csv(index=False))


if __name__ == "__main__":
    app()
