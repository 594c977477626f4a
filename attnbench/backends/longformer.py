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

from attnbench.backends.masking import key_mask, zero_masked_rows
from attnbench.backends.registry import Backend, int_param, register


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

    def geometry(self, n: int) -> tuple[int, int, int, int]:
        """(w, c, m, p): one-sided width, chunk length, chunks, neighbour chunks per side."""
        w = int(self.values["window"]) // 2
        c = max(1, min(w // 2, n))
        m = -(-n // c)
        p = min(-(-w // c), m - 1)
        return w, c, m, p

    def forward(self, q, k, v, mask=None):
        b, h, n, d = q.shape
        g = min(int(self.values["global"]), n)
        w, c, m, p = self.geometry(n)
        pad = m * c - n
        dev = q.device
        valid = torch.ones(b, n, dtype=torch.bool, device=dev) if mask is None else mask
        qs = q * (1.0 / math.sqrt(d))

        # Band: query chunk r against key chunks r-p..r+p, [B, H, m, c, (2p+1)c].
        span = (2 * p + 1) * c
        kp, vp = _pad(k, p * c, p * c + pad), _pad(v, p * c, p * c + pad)
        k_win = kp.unfold(-2, span, c).transpose(-1, -2)  # [B, H, m, span, d]
        v_win = vp.unfold(-2, span, c).transpose(-1, -2)
        ok = torch.nn.functional.pad(valid, (p * c, p * c + pad), value=False)
        ok_win = ok.unfold(-1, span, c)  # [B, m, span]
        a = torch.arange(c, device=dev)[:, None]  # query offset in its chunk
        t = torch.arange(span, device=dev)[None, :]  # key offset in the window
        allowed = ((a + p * c - t).abs() <= w)[None, None] & ok_win[:, :, None, :]
        qb = _pad(qs, 0, pad).unflatten(-2, (m, c))  # [B, H, m, c, d]
        scores = (qb @ k_win.transpose(-1, -2)).add_(_bias(allowed, q.dtype)[:, None])

        if g:
            # Global keys outside each query's band (those inside are already scored).
            i = torch.arange(m * c, device=dev)[:, None]
            j = torch.arange(g, device=dev)[None, :]
            far = ((i - j).abs() > w)[None] & valid[:, None, :g]  # [B, m*c, g]
            sg = qb.flatten(-3, -2) @ k[..., :g, :].transpose(-1, -2)
            sg = sg.add_(_bias(far, q.dtype)[:, None]).unflatten(-2, (m, c))
            weights = torch.softmax(torch.cat([scores, sg], -1), -1)
            out = weights[..., :span] @ v_win
            out = out.flatten(-3, -2) + weights[..., span:].flatten(-3, -2) @ v[..., :g, :]
        else:
            out = (torch.softmax(scores, -1) @ v_win).flatten(-3, -2)
        out = out[..., :n, :]

        if g:
            # Global queries attend to every (real) key: g dense rows.
            sq = (qs[..., :g, :] @ k.transpose(-1, -2)).add_(_bias(key_mask(valid), q.dtype))
            out = torch.cat([torch.softmax(sq, -1) @ v, out[..., g:, :]], -2)
        return zero_masked_rows(out, mask)

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
