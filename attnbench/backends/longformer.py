"""Longformer attention (Beltagy et al. 2020): a sliding window plus global tokens.

With w = window // 2 (the one-sided width), query i attends to the keys j with
|i - j| <= w (so `window=512` gives 256 keys on each side plus the token itself, as in
the paper's and HF's `attention_window`), and the first `global` positions are global:
they attend to every key and every query attends to them. Global tokens use the same
q, k, v as the rest (the paper gives them separate projections; a backend only sees one
set). The invariant: the output is exact softmax attention restricted to that pattern
(and to real keys, the shared mask rule), so window >= 2n gives softmax attention.

The forward pass is banded, not a masked n x n matrix: queries are cut into chunks of
c = max(1, w // 2) tokens (at most n), each chunk scores the key chunks up to p = ceil(w / c)
away on either side with the band mask inside that block, plus the g global keys (those
outside its band, so none counts twice), under one softmax; the g global rows are dense.
Cost O(n (2w + c + g) d) time and memory. torch's flex_attention with a band block mask is
not used: on the CPU it has no backward and compiles per shape.
"""

from __future__ import annotations

import math

import torch

from attnbench.backends.cost import Cost, Shape, autograd_backward, matmul
from attnbench.backends.masking import key_mask, zero_masked_rows
from attnbench.backends.registry import Backend, int_param, register
from attnbench.backends.softmax import softmax_cost


def longformer_pattern(n: int, window: int, n_global: int, rows: slice = slice(None)):
    """Dense bool [r, n] of the pattern for the query rows `rows` (default all): the band
    |i - j| <= window // 2, global rows i < g, and global columns j < g."""
    i = torch.arange(n)[rows][:, None]
    j = torch.arange(n)[None, :]
    return ((i - j).abs() <= window // 2) | (i < n_global) | (j < n_global)


def _bias(allowed: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """0 where allowed, the dtype's finite minimum elsewhere: a row with no allowed key
    (padding only) gives junk, never NaN, in the forward pass and its gradients."""
    zero = torch.zeros((), dtype=dtype, device=allowed.device)
    return torch.where(allowed, zero, torch.finfo(dtype).min)


def _pad(x: torch.Tensor, front: int, back: int) -> torch.Tensor:
    return torch.nn.functional.pad(x, (0, 0, front, back))


def _triangle(k: int) -> int:
    """1 + 2 + ... + k (0 for k <= 0)."""
    return k * (k + 1) // 2 if k > 0 else 0


def _band_pairs(rows: int, n: int, w: int) -> int:
    """Pairs (i, j) with i < rows, j < n and |i - j| <= w: row i has min(n - 1, i + w) -
    max(0, i - w) + 1 keys, summed in closed form."""
    return (
        rows * (rows - 1) // 2 + rows * w + rows
        - _triangle(rows + w - n) - _triangle(rows - 1 - w)
    )  # fmt: skip


def _far_pairs(rows: int, w: int, g: int) -> int:
    """Pairs (i, j) with i < rows, j < min(g, i - w): row i's global keys beyond its band."""
    return _triangle(rows - 1 - w) - _triangle(rows - 1 - w - g)


@register
class Longformer(Backend):
    """Sliding-window attention of two-sided width `window` plus `global` global tokens."""

    name = "longformer"
    params = {
        "window": int_param(512, 1, None, "two-sided window: |i - j| <= window // 2"),
        "global": int_param(0, 0, None, "global tokens: the first positions, attend to all"),
    }
    shorthand = "window"
    complexity = "O(n (window + global) d) time and memory"
    summary = "Longformer sliding window + global tokens (Beltagy et al. 2020)"
    stages = ("band", "global_keys", "softmax", "weighted_sum", "global_rows")

    def validate(self, case) -> None:
        """global <= n; window <= 2n, which covers every token already (or the default,
        chosen for long sequences and kept at short ones)."""
        n = case.n
        self.check_at_most("global", n, f"the n = {n} tokens")
        limit = max(2 * n, self.params["window"].default)
        self.check_at_most(
            "window", limit, f"max(2n, its default) at n = {n}: a wider window sees no more tokens"
        )

    def geometry(self, n: int) -> tuple[int, int, int, int]:
        """(w, c, m, p): one-sided width, chunk length, chunks, neighbour chunks per side."""
        w = int(self.values["window"]) // 2
        c = max(1, min(w // 2, n))
        m = -(-n // c)
        p = min(-(-w // c), m - 1)
        return w, c, m, p

    def stages_in(self, mode: str, device: str = "cpu") -> tuple[str, ...]:
        """As `Backend.stages_in`, without the global stages when global=0."""
        stages = super().stages_in(mode, device)
        if self.values["global"]:
            return stages
        return tuple(s for s in stages if s not in ("global_keys", "global_rows"))

    def forward(self, q, k, v, mask=None):
        b, h, n, d = q.shape
        g = min(int(self.values["global"]), n)
        w, c, m, p = self.geometry(n)
        pad = m * c - n
        dev = q.device
        valid = torch.ones(b, n, dtype=torch.bool, device=dev) if mask is None else mask
        span = (2 * p + 1) * c

        with self.stage("band"):
            # Query chunk r against key chunks r-p..r+p, [B, H, m, c, (2p+1)c].
            qs = q * (1.0 / math.sqrt(d))
            ok = torch.nn.functional.pad(valid, (p * c, p * c + pad), value=False)
            k_win = _pad(k, p * c, p * c + pad).unfold(-2, span, c).transpose(-1, -2)
            ok_win = ok.unfold(-1, span, c)  # [B, m, span]
            a = torch.arange(c, device=dev)[:, None]  # query offset in its chunk
            t = torch.arange(span, device=dev)[None, :]  # key offset in the window
            allowed = ((a + p * c - t).abs() <= w)[None, None] & ok_win[:, :, None, :]
            qb = _pad(qs, 0, pad).unflatten(-2, (m, c))  # [B, H, m, c, d]
            scores = (qb @ k_win.transpose(-1, -2)).add_(_bias(allowed, q.dtype)[:, None])

        if g:
            with self.stage("global_keys"):
                # Global keys outside each query's band (those inside are already scored).
                i = torch.arange(m * c, device=dev)[:, None]
                j = torch.arange(g, device=dev)[None, :]
                far = ((i - j).abs() > w)[None] & valid[:, None, :g]  # [B, m*c, g]
                sg = qb.flatten(-3, -2) @ k[..., :g, :].transpose(-1, -2)
                sg = sg.add_(_bias(far, q.dtype)[:, None]).unflatten(-2, (m, c))
                scores = torch.cat([scores, sg], -1)

        with self.stage("softmax"):
            weights = torch.softmax(scores, -1)
            del scores  # freed in the stage that last reads it

        with self.stage("weighted_sum"):
            v_win = _pad(v, p * c, p * c + pad).unfold(-2, span, c).transpose(-1, -2)
            out = (weights[..., :span] @ v_win).flatten(-3, -2)
            if g:
                out = out + weights[..., span:].flatten(-3, -2) @ v[..., :g, :]
            out = out[..., :n, :]
            del weights

        if g:
            with self.stage("global_rows"):
                # Global queries attend to every (real) key: g dense rows.
                sq = qs[..., :g, :] @ k.transpose(-1, -2)
                sq = sq.add_(_bias(key_mask(valid), q.dtype))
                out = torch.cat([torch.softmax(sq, -1) @ v, out[..., g:, :]], -2)
        return zero_masked_rows(out, mask)

    def pairs(self, n: int) -> tuple[int, int, int]:
        """(band, global_keys, global_rows): the pattern's (query, key) pairs of one plane,
        counted exactly (rows near the ends have fewer band keys). band: |i - j| <= w for
        the rows i >= g; global_keys: keys j < g outside the band of the rows i >= g;
        global_rows: the g rows' n keys. Their sum is `longformer_pattern`'s count."""
        g = min(int(self.values["global"]), n)
        w = int(self.values["window"]) // 2
        band = _band_pairs(n, n, w) - _band_pairs(g, n, w)
        global_keys = _far_pairs(n, w, g) - _far_pairs(g, w, g)
        return band, global_keys, g * n

    def cost(self, shape: Shape) -> dict[str, Cost]:
        """The pattern's work, pair by pair (`pairs`; the chunked blocks also score pairs
        outside it, which are not counted). With P = B H, N_b, N_g, N_r a plane's band,
        global-key and global-row pairs: band, 2 P N_b d matmul, P (n d + N_b) other (the
        1/sqrt(d) scaling, the bias), q and k read, scores written; global_keys, 2 P N_g d
        matmul, P N_g other; softmax, 5 P (N_b + N_g); weighted_sum, 2 P (N_b + N_g) dv
        matmul and P (n - g) dv sums of the two parts when g > 0; global_rows, 2 P N_r
        (d + dv) matmul and 6 P N_r other (bias, softmax), its scores and weights written
        and read back. Backward: `autograd_backward` of all of them. The mask's work is not
        counted."""
        n, d, dv = shape.n, shape.dim, shape.dv
        g = min(int(self.values["global"]), n)
        band, far, rows = (shape.elements(x) for x in self.pairs(n))
        planes = shape.planes
        forward = {
            "band": Cost(
                2.0 * band * d,
                shape.elements(n, d) + band,
                shape.bytes(2 * n * d) + band * shape.itemsize,
            ),
            "softmax": softmax_cost(band + far, shape.itemsize),
            "weighted_sum": Cost(
                2.0 * (band + far) * dv,
                shape.elements(n - g, dv) if g else 0.0,
                shape.bytes(n * dv + (n - g) * dv) + (band + far) * shape.itemsize,
            ),
        }
        if g:
            forward["global_keys"] = Cost(
                2.0 * far * d, far, shape.bytes(n * d + g * d) + far * shape.itemsize
            )
            forward["global_rows"] = Cost(
                matmul(planes, g, d, n) + matmul(planes, g, n, dv),
                6.0 * rows,
                shape.bytes(g * d + n * d + n * dv + 4 * g * n + g * dv),
            )
        costs = {s: forward[s] for s in self.stages if s in forward} if shape.forward else {}
        if shape.backward:
            costs["backward"] = autograd_backward(forward.values())
        return costs

    def attention_map(self, q, k, mask=None):
        """Dense [B, H, n, n] weights: softmax restricted to the pattern (small n only)."""
        return self._map_rows(q, k, slice(None), mask)

    def map_blocks(self, q, k, blocks, grid=None):
        for rows in blocks:
            yield rows, self._map_rows(q[..., rows, :], k, rows, None)

    def _map_rows(self, q, k, rows: slice, mask):
        n = k.shape[-2]
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
        pattern = longformer_pattern(n, self.values["window"], self.values["global"], rows)
        allowed = pattern.to(q.device)[None, None]
        if mask is not None:
            allowed = allowed & key_mask(mask)
        weights = torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1)
        return torch.nan_to_num(weights, nan=0.0)

    def predicted_bytes(self, batch, heads, n, d, itemsize):
        _, c, m, p = self.geometry(n)
        g = min(int(self.values["global"]), n)
        keys = (2 * p + 1) * c + g
        # scores and weights per query, the unfolded key/value windows, the global rows
        return (
            batch
            * heads
            * (3 * m * c * keys + 2 * m * (2 * p + 1) * c * d + 2 * g * n)
            * (itemsize)
        )
