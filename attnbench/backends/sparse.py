"""Sparse Transformer attention (Child et al. 2019): the strided and fixed factorised patterns.

Each query attends only to the union of the paper's two heads' sets, A1 and A2, in their
bidirectional form (the original is causal; images need both directions):

- strided: A1_i = {j : |i - j| < l} (local band), A2_i = {j : (i - j) mod l = 0} (same column
  of the l-strided layout; for a grid with l = W, the same image column);
- fixed: A1_i = {j : floor(j / l) = floor(i / l)} (same block),
  A2_i = {j : j mod l in {l - c, ..., l - 1}} (the c summary positions of every block).

Indices are the flat token positions (grid tokens row-major, p = y*W + x); the grid only picks
the default l. Every query is in its own A1, so no row is empty.

The forward pass is block-sparse in plain torch: queries are cut into blocks of l, each block
scores only its band/block keys and the strided/summary keys, and one softmax runs over both
parts, so the cost is O(n (l + n/l) d) for strided and O(n (l + c n/l) d) for fixed instead of
O(n^2 d). torch's flex_attention does not fit these patterns on the CPU: eager it
materialises the full score matrix, and compiled its block mask can skip no 128 x 128 tile,
since the strided columns and the summary keys fall in every tile, so it does dense work.
"""

from __future__ import annotations

import math

import torch

from attnbench.backends.cost import Cost, Shape, autograd_backward
from attnbench.backends.masking import key_mask, zero_masked_rows
from attnbench.backends.registry import Backend, int_param, register, token_grid
from attnbench.backends.softmax import softmax_cost
from attnbench.errors import UsageError


def auto_stride(n: int, grid: tuple[int, int] | None) -> int:
    """l = 0 (auto): the image width W for a grid, round(sqrt(n)) for a sequence (as the paper)."""
    height, width = token_grid(grid, n)
    return width if height > 1 else max(1, round(math.sqrt(n)))


def strided_pattern(n: int, l: int, rows: slice = slice(None)) -> torch.Tensor:  # noqa: E741
    """Dense bool [r, n] of the bidirectional strided pattern A1 | A2 for the query rows
    `rows` (default all: the test oracle); l as in the paper."""
    i = torch.arange(n)[rows][:, None]
    j = torch.arange(n)[None, :]
    return ((i - j).abs() < l) | ((i - j) % l == 0)


def fixed_pattern(n: int, l: int, c: int, rows: slice = slice(None)) -> torch.Tensor:  # noqa: E741
    """Dense bool [r, n] of the bidirectional fixed pattern A1 | A2 for the query rows `rows`
    (default all: the test oracle); l as in the paper."""
    i = torch.arange(n)[rows][:, None]
    j = torch.arange(n)[None, :]
    return (j // l == i // l) | (j % l >= l - c)


def _pad_tokens(x: torch.Tensor, front: int, back: int) -> torch.Tensor:
    """Zero-pad the token axis (-2) of [B, H, n, d]."""
    return torch.nn.functional.pad(x, (0, 0, front, back))


def _pad_mask(valid: torch.Tensor, front: int, back: int) -> torch.Tensor:
    """Pad a bool [B, n] key-validity mask with False (padding is never a key)."""
    return torch.nn.functional.pad(valid, (front, back), value=False)


def _bias(allowed: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Additive score bias: 0 where allowed, the dtype's finite minimum elsewhere.

    Finite rather than -inf, so a row with no allowed key gives uniform junk instead of NaN
    (in the forward pass and in its gradients); such rows are only padding or masked
    queries, which the caller drops or zeroes.
    """
    zero = torch.zeros((), dtype=dtype, device=allowed.device)
    return torch.where(allowed, zero, torch.finfo(dtype).min)


def _band_pairs(n: int, w: int) -> int:
    """Pairs (i, j) of n tokens with |i - j| <= w: n on the diagonal, n - t at offset +-t."""
    w = min(w, n - 1)
    return n + 2 * (w * n - w * (w + 1) // 2)


def _pattern_costs(shape: Shape, names, first: int, second: int, second_keys: int):
    """Costs of a two-part pattern: scores of its `first` and `second` pairs of a plane
    (stages `names`; the second part reads `second_keys` keys), one softmax over both, the
    weighted sum; backward as autograd's."""
    n, d, dv, size = shape.n, shape.dim, shape.dv, shape.itemsize
    first, second = shape.elements(first), shape.elements(second)
    pairs = first + second
    forward = {
        names[0]: Cost(
            2.0 * first * d, shape.elements(n, d) + first, shape.bytes(2 * n * d) + first * size
        ),
        names[1]: Cost(
            2.0 * second * d, second, shape.bytes((n + second_keys) * d) + second * size
        ),
        "softmax": softmax_cost(pairs, size),
        "weighted_sum": Cost(
            2.0 * pairs * dv, shape.elements(n, dv), shape.bytes(2 * n * dv) + pairs * size
        ),
    }
    costs = dict(forward) if shape.forward else {}
    if shape.backward:
        costs["backward"] = autograd_backward(forward.values())
    return costs


class _Sparse(Backend):
    """Shared parts: resolving l, the dense oracle map (attention_map also takes the grid)."""

    spatial = True
    backward = True
    map_in_blocks = True  # a map row needs only its own query and pattern row

    def stride(self, n: int, grid: tuple[int, int] | None = None) -> int:
        return int(self.values["l"]) or auto_stride(n, grid)

    def pattern(self, n: int, grid=None, rows: slice = slice(None)) -> torch.Tensor:
        raise NotImplementedError

    def attention_map(self, q, k, mask=None, grid=None):
        """Dense [B, H, n, n] weights: softmax restricted to the pattern (small n only)."""
        return self._map_rows(q, k, slice(None), mask, grid)

    def map_blocks(self, q, k, blocks, grid=None):
        """The map a block of query rows at a time, each with its rows of the pattern."""
        for rows in blocks:
            yield rows, self._map_rows(q[..., rows, :], k, rows, None, grid)

    def _map_rows(self, q, k, rows: slice, mask, grid):
        """Weights [B, H, r, n] of the queries q, rows `rows` of the sequence: softmax
        restricted to their pattern rows."""
        n = k.shape[-2]
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
        allowed = self.pattern(n, grid, rows).to(q.device)[None, None]
        if mask is not None:
            allowed = allowed & key_mask(mask)
        weights = torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1)
        return torch.nan_to_num(weights, nan=0.0)  # rows whose every allowed key is masked


@register
class SparseStrided(_Sparse):
    """Strided pattern: a local band of width l plus every l-th token (same column)."""

    name = "sparse-strided"
    params = {
        "l": int_param(0, 0, None, "stride and band width; 0 = auto: W for a grid, sqrt(n)"),
    }
    complexity = "O(n (l + n/l) d) time and memory; O(n^1.5 d) at l = sqrt(n)"
    summary = "Sparse Transformer strided pattern (Child et al. 2019), bidirectional"
    stages = ("band", "stride", "softmax", "weighted_sum")

    def validate(self, case) -> None:
        self.check_at_most("l", case.n, f"the n = {case.n} tokens a stride or band can span")

    def pattern(self, n, grid=None, rows=slice(None)):
        return strided_pattern(n, self.stride(n, grid), rows)

    def forward(self, q, k, v, mask=None, grid=None):
        """Block-sparse: block r of l queries scores key blocks r-1..r+1 (the band) and the
        m = ceil(n/l) keys of each query's column (the stride), as [l, m, m] matmuls."""
        b, h, n, d = q.shape
        l = self.stride(n, grid)  # noqa: E741 - l as in the paper
        m = -(-n // l)
        pad = m * l - n
        valid = torch.ones(b, n, dtype=torch.bool, device=q.device) if mask is None else mask

        with self.stage("band"):
            # A1, the band |i - j| < l: key blocks r-1, r, r+1 around query block r.
            q = q * (1.0 / math.sqrt(d))
            kb = _pad_tokens(k, l, l + pad).unflatten(-2, (m + 2, l))
            k_win = torch.cat([kb[..., :-2, :, :], kb[..., 1:-1, :, :], kb[..., 2:, :, :]], -2)
            mb = _pad_mask(valid, l, l + pad).unflatten(-1, (m + 2, l))
            ok_win = torch.cat([mb[:, :-2], mb[:, 1:-1], mb[:, 2:]], -1)  # [B, m, 3l]
            off = torch.arange(l, device=q.device)
            band = (off[:, None] + l - torch.arange(3 * l, device=q.device)[None, :]).abs() < l
            bias1 = _bias(band[None, None] & ok_win[:, :, None, :], q.dtype)  # [B, m, l, 3l]
            qb = _pad_tokens(q, 0, pad).unflatten(-2, (m, l))  # [B, H, m, l, d]
            s1 = (qb @ k_win.transpose(-1, -2)).add_(bias1[:, None])

        with self.stage("stride"):
            # A2, the stride (i - j) mod l = 0: column t = i mod l, key rows s != r (s = r is
            # the query itself, already in the band), as [l, m, m] score blocks.
            kc = _pad_tokens(k, 0, pad).unflatten(-2, (m, l)).transpose(-3, -2)  # [B,H,l,m,d]
            ok_col = _pad_mask(valid, 0, pad).unflatten(-1, (m, l)).transpose(-1, -2)
            off_diag = ~torch.eye(m, dtype=torch.bool, device=q.device)
            bias2 = _bias(off_diag[None, None] & ok_col[:, :, None, :], q.dtype)  # [B,l,m,m]
            s2 = (qb.transpose(-3, -2) @ kc.transpose(-1, -2)).add_(bias2[:, None])

        with self.stage("softmax"):
            # One softmax over both key sets of each query: [B, H, m, l, 3l + m].
            w = torch.softmax(torch.cat([s1, s2.transpose(-3, -2)], -1), -1)
            del s1, s2  # freed in the stage that last reads them

        with self.stage("weighted_sum"):
            vb = _pad_tokens(v, l, l + pad).unflatten(-2, (m + 2, l))
            v_win = torch.cat([vb[..., :-2, :, :], vb[..., 1:-1, :, :], vb[..., 2:, :, :]], -2)
            vc = _pad_tokens(v, 0, pad).unflatten(-2, (m, l)).transpose(-3, -2)
            strided = (w[..., 3 * l :].transpose(-3, -2) @ vc).transpose(-3, -2)
            out = (w[..., : 3 * l] @ v_win + strided).flatten(-3, -2)[..., :n, :]
            del w
        return zero_masked_rows(out, mask)

    def pairs(self, n: int, grid=None) -> tuple[int, int]:
        """(band, stride): the pattern's (query, key) pairs of one plane, counted exactly.
        band: |i - j| < l (fewer keys near the ends); stride: j != i with (i - j) mod l = 0,
        within each of the l columns (a = n - (m - 1) l of them hold m tokens, the rest
        m - 1). Their sum is `strided_pattern`'s count."""
        l = self.stride(n, grid)  # noqa: E741
        m = -(-n // l)
        full = n - (m - 1) * l
        stride = full * m * (m - 1) + (l - full) * (m - 1) * (m - 2)
        return _band_pairs(n, l - 1), stride

    def cost(self, shape: Shape) -> dict[str, Cost]:
        """The pattern's work pair by pair (`pairs`; the blocks also score pairs outside the
        band, which are not counted). With P = B H and N_1, N_2 a plane's band and stride
        pairs: band, 2 P N_1 d matmul, P (n d + N_1) other (the 1/sqrt(d) scaling, the bias),
        q and k read, scores written; stride, 2 P N_2 d matmul, P N_2 other; softmax,
        5 P (N_1 + N_2); weighted_sum, 2 P (N_1 + N_2) dv matmul, P n dv sums of the two
        parts. Backward: `autograd_backward` of all four. The mask's work is not counted."""
        band, stride = self.pairs(shape.n, shape.grid)
        return _pattern_costs(shape, ("band", "stride"), band, stride, shape.n)

    def predicted_bytes(self, batch, heads, n, d, itemsize):
        l = max(1, round(math.sqrt(n))) if not self.values["l"] else int(self.values["l"])  # noqa: E741
        m = -(-n // l)
        return 3 * batch * heads * m * l * (3 * l + m) * itemsize  # scores, exps, masks


@register
class SparseFixed(_Sparse):
    """Fixed pattern: the query's own block of l plus the last c tokens of every block."""

    name = "sparse-fixed"
    params = {
        "l": int_param(0, 0, None, "block length; 0 = auto: W for a grid, sqrt(n)"),
        "c": int_param(1, 1, None, "summary tokens per block, 1..l (clamped to l when l=auto)"),
    }
    complexity = "O(n (l + c n/l) d) time and memory; O(n^1.5 d) at l = sqrt(n), c = 1"
    summary = "Sparse Transformer fixed pattern (Child et al. 2019), bidirectional"
    stages = ("block", "summaries", "softmax", "weighted_sum")

    def __init__(self, **values):
        super().__init__(**values)
        l, c = int(self.values["l"]), int(self.values["c"])  # noqa: E741
        if c < 1 or l < 0 or (l and c > l):
            raise UsageError(f"sparse-fixed: need 1 <= c <= l, got l={l}, c={c}")

    def validate(self, case) -> None:
        for key in ("l", "c"):
            self.check_at_most(key, case.n, f"the n = {case.n} tokens a block can hold")

    def summary_width(self, l: int) -> int:  # noqa: E741
        return min(int(self.values["c"]), l)

    def pattern(self, n, grid=None, rows=slice(None)):
        l = self.stride(n, grid)  # noqa: E741
        return fixed_pattern(n, l, self.summary_width(l), rows)

    def forward(self, q, k, v, mask=None, grid=None):
        """Block-sparse: block r of l queries scores its own block (A1) and the c summary keys
        of every other block (A2; its own summaries are already in A1)."""
        b, h, n, d = q.shape
        l = self.stride(n, grid)  # noqa: E741
        c = self.summary_width(l)
        m = -(-n // l)
        pad = m * l - n
        valid = torch.ones(b, n, dtype=torch.bool, device=q.device) if mask is None else mask

        with self.stage("block"):
            q = q * (1.0 / math.sqrt(d))
            qp = _pad_tokens(q, 0, pad)
            qb, kb = (t.unflatten(-2, (m, l)) for t in (qp, _pad_tokens(k, 0, pad)))
            ok = _pad_mask(valid, 0, pad).unflatten(-1, (m, l))  # [B, m, l]
            s1 = (qb @ kb.transpose(-1, -2)).add_(_bias(ok, q.dtype)[:, None, :, None, :])

        with self.stage("summaries"):
            ks = kb[..., l - c :, :].flatten(-3, -2)  # [B, H, m*c, d], block s's summaries
            own = torch.arange(m, device=q.device)
            other = own[:, None] != own.repeat_interleave(c)[None, :]  # [m(r), m*c]
            bias2 = _bias(other[None] & ok[:, :, l - c :].flatten(1)[:, None, :], q.dtype)
            s2 = (qp @ ks.transpose(-1, -2)).unflatten(-2, (m, l))
            s2 = s2.add_(bias2[:, None, :, None, :])

        with self.stage("softmax"):
            # One softmax over both key sets of each query: [B, H, m, l, l + m*c].
            w = torch.softmax(torch.cat([s1, s2], -1), -1)
            del s1, s2  # freed in the stage that last reads them

        with self.stage("weighted_sum"):
            vb = _pad_tokens(v, 0, pad).unflatten(-2, (m, l))
            vs = vb[..., l - c :, :].flatten(-3, -2)
            summaries = w[..., l:].flatten(-3, -2) @ vs  # [B, H, m*l, dv]
            out = ((w[..., :l] @ vb).flatten(-3, -2) + summaries)[..., :n, :]
            del w
        return zero_masked_rows(out, mask)

    def summary_keys(self, n: int, grid=None) -> int:
        """How many summary positions (j mod l >= l - c, j < n) the sequence holds."""
        l = self.stride(n, grid)  # noqa: E741
        c = self.summary_width(l)
        m = -(-n // l)
        return (m - 1) * c + max(0, n - (m - 1) * l - (l - c))

    def pairs(self, n: int, grid=None) -> tuple[int, int]:
        """(block, summaries): the pattern's (query, key) pairs of one plane, counted
        exactly. block: same block of l (the last one holds n - (m - 1) l tokens);
        summaries: the summary positions of the other blocks (the last block holds only
        those below n). Their sum is `fixed_pattern`'s count."""
        l = self.stride(n, grid)  # noqa: E741
        c = self.summary_width(l)
        m = -(-n // l)
        last = n - (m - 1) * l
        last_summaries = max(0, last - (l - c))
        block = (m - 1) * l * l + last * last
        return block, n * self.summary_keys(n, grid) - (m - 1) * l * c - last * last_summaries

    def cost(self, shape: Shape) -> dict[str, Cost]:
        """As `SparseStrided.cost`, with N_1 the block pairs and N_2 the summary pairs
        (`pairs`); summaries reads q and the summary keys."""
        block, summaries = self.pairs(shape.n, shape.grid)
        keys = self.summary_keys(shape.n, shape.grid)
        return _pattern_costs(shape, ("block", "summaries"), block, summaries, keys)

    def predicted_bytes(self, batch, heads, n, d, itemsize):
        l = max(1, round(math.sqrt(n))) if not self.values["l"] else int(self.values["l"])  # noqa: E741
        c = min(int(self.values["c"]), l)
        m = -(-n // l)
        return 3 * batch * heads * m * l * (l + m * c) * itemsize
