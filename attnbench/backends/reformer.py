"""Reformer's LSH attention (Kitaev et al. 2020, "Reformer: The Efficient Transformer").

Shared QK: Reformer computes keys from the same projection as queries, k_j = q_j / |q_j|.
This backend takes `q` for both and ignores the `k` argument: scores are
q_i . (q_j / |q_j|) / sqrt(d).

Per hash round (`hashes` of them), angular LSH with a random rotation R [d, n_buckets/2]
puts token i in bucket argmax([q_i R ; -q_i R]). Tokens are sorted by (bucket, position),
the sorted sequence is cut into chunks of `bucket` tokens, and each chunk's queries attend
to the keys of their own chunk and of the previous chunk (chunk 0's previous is the last
chunk, cyclically, as the reference implementations do). A token does not attend to
itself unless it has no other (unmasked) key in that window. Rounds give outputs o^r and
log-sum-exps z^r of their scores; the output is sum_r exp(z^r - logsumexp_r z^r) o^r
(as the reference implementations do, a key found in several rounds is not de-duplicated).

Length rule: n is padded up to n_pad, a multiple of `bucket` (chunk length), giving
n_pad / bucket chunks; n_buckets = n_pad / bucket, rounded up to even, at least 2
(Reformer's rule of as many buckets as chunks; angular LSH needs an even count). Padding
tokens and masked tokens are sorted after every real token (an extra last bucket) and are
never keys; masked rows output zero. With n <= 2 * bucket every query's window is every
token, so the backend is softmax over the shared-QK scores with the self-exclusion rule.

Rotations are drawn on the inputs' device from the seed (reproducible on one device, not
across devices), one per head and round, shared across the batch; `resample=call` draws
new ones on every forward (call 0 from the seed, call c from a seed derived from (seed, c),
as YOSO does), `resample=fixed` keeps call 0's.

Cost per round: the sort, O(n log n); the chunked scores, O(n bucket d); and the hash,
O(n d n_buckets) = O(n^2 d / bucket) with Reformer's n_buckets rule: a small constant
(d / (2 bucket) multiply-adds per token pair) but the term that grows fastest. No n x n
matrix is formed.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from attnbench.backends.cost import Cost, Shape, autograd_backward, matmul
from attnbench.backends.masking import zero_masked_rows
from attnbench.backends.registry import MAX_SEED_PARAM, Backend, int_param, register
from attnbench.backends.resampling import Resampling, resample_param

# Projections are hashed a block of tokens at a time, at most this many floats per block: the
# projection [B, H, R, n, n_buckets/2] grows as n^2 and is read twice (max and min), so a
# block that stays in cache keeps the hash's cost at its multiply-adds.
HASH_BLOCK = 1 << 20


def layout(n: int, bucket: int) -> tuple[int, int, int]:
    """(n_pad, chunks, n_buckets) of n tokens with chunk length `bucket` (module doc)."""
    chunks = -(-n // bucket)
    n_buckets = max(2, chunks + chunks % 2)
    return chunks * bucket, chunks, n_buckets


def _gather_rows(x: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """x [G, n, e], idx [G, R, m] -> [G, R, m, e]: rows picked by index, one copy each."""
    g, r, m = idx.shape
    n, e = x.shape[-2:]
    base = torch.arange(g, device=idx.device).mul_(n).view(g, 1, 1)
    return x.reshape(g * n, e).index_select(0, (idx + base).view(-1)).view(g, r, m, e)


def _codes(x: torch.Tensor, rot: torch.Tensor) -> torch.Tensor:
    """Buckets [B, H, R, n] of tokens x [B, H, n, d] under rotations rot [H, R, d, nb/2]:
    the argmax over [xR ; -xR] (first index on ties), without building the concatenation."""
    proj = torch.einsum("bhnd,hrdk->bhrnk", x, rot)
    top, up = proj.max(-1)
    low, down = proj.min(-1)
    return torch.where(top >= -low, up, down + rot.shape[-1])


def _allowed(ok: torch.Tensor, c: int, chunks: int) -> torch.Tensor:
    """Which keys each sorted query may use [G, R, chunks, c, 2c], from the window keys'
    validity ok [G, R, chunks, 2c]: every valid key but itself, and itself only when no other
    valid key is there (never an empty row). In sorted order query j of a chunk is key j of
    its window, and also key c + j when the only chunk is its own previous one."""
    is_self = torch.eye(c, dtype=torch.bool, device=ok.device).repeat(1, 2)
    if chunks > 1:
        is_self[:, c:] = False
    others = ok.sum(-1, keepdim=True) - ok[..., :c] * (1 if chunks > 1 else 2)
    return torch.where(is_self, (others == 0).unsqueeze(-1), ok.unsqueeze(-2))


def _window(x: torch.Tensor) -> torch.Tensor:
    """Chunks [..., chunks, c, e] -> each chunk's own and previous chunk [..., chunks, 2c, e]."""
    return torch.cat([x, x.roll(1, dims=-3)], dim=-2)


@register
class Reformer(Resampling, Backend):
    """LSH attention: each query attends to the keys sharing its chunk window after the
    (bucket, position) sort; the invariant is softmax over that window's shared-QK scores
    with the self-exclusion rule, rounds mixed by their log-sum-exp weights."""

    name = "reformer"
    params = {
        "hashes": int_param(2, 1, 64, "hash rounds"),
        "bucket": int_param(64, 1, 1 << 16, "chunk length (n padded to a multiple)"),
        "seed": int_param(0, 0, MAX_SEED_PARAM, "seed of the random rotations"),
        "resample": resample_param("rotations"),
    }
    complexity = (
        "O(h n log n + h n c d + h n^2 d / c) time (the last is hashing into n/c buckets), "
        "O(h n c) memory (c = bucket, h = hashes)"
    )
    stochastic = True
    summary = "Reformer LSH attention: shared QK, sorted buckets, chunk + previous chunk"
    stages = ("hash", "sort", "chunk_attention", "unsort", "combine")

    def validate(self, case) -> None:
        """bucket <= n (a longer chunk is padding), or the default's bucket."""
        limit = max(case.n, self.params["bucket"].default)
        self.check_at_most(
            "bucket", limit, f"max(n, its default) at n = {case.n}: a longer chunk holds padding"
        )

    def rotations(self, heads: int, d: int, n_buckets: int, device, call: int = 0):
        """R [heads, hashes, d, n_buckets/2] of draw `call`, kept for the latest call."""
        shape = (heads, self.values["hashes"], d, n_buckets // 2)

        def draw(seed: int) -> torch.Tensor:
            gen = torch.Generator(device=device).manual_seed(seed)
            return torch.randn(shape, generator=gen, device=device)  # no host copy on a GPU

        return self._drawn((heads, d, n_buckets, str(device)), call, draw)

    def buckets(self, q, mask=None, call: int = 0) -> torch.Tensor:
        """Buckets [B, H, hashes, n_pad] of the tokens under draw `call`; padding and
        masked tokens get the extra bucket n_buckets (sorted last)."""
        b, h, n, d = q.shape
        n_pad, _, n_buckets = layout(n, self.values["bucket"])
        rot = self.rotations(h, d, n_buckets, q.device, call)
        with torch.no_grad():
            x = q.float()
            step = max(1, HASH_BLOCK // (b * h * rot.shape[1] * rot.shape[-1]))
            codes = torch.cat([_codes(x[:, :, i : i + step], rot) for i in range(0, n, step)], -1)
            if mask is not None:
                codes = codes.masked_fill(~mask[:, None, None, :], n_buckets)
            return F.pad(codes, (0, n_pad - n), value=n_buckets)

    def _attend(self, q, v, mask, call):
        """Per-round outputs [B*H, R, n_pad, dv], log-sum-exps [B*H, R, n_pad], and each
        sorted query's weights [B*H, R, chunks, c, 2c] with its keys' positions and
        the sort order [B*H, R, n_pad]."""
        b, h, n, d = q.shape
        c = self.values["bucket"]
        n_pad, chunks, _ = layout(n, c)
        rounds = self.values["hashes"]
        dtype = torch.float64 if q.dtype == torch.float64 else torch.float32
        with self.stage("hash"):
            codes = self.buckets(q, mask, call).reshape(b * h, rounds, n_pad)

        with self.stage("sort"):
            pos = torch.arange(n_pad, device=q.device)
            order = (codes * n_pad + pos).argsort(-1)  # sort by (bucket, position)
            undo = torch.empty_like(order).scatter_(-1, order, pos.expand_as(order))
            x = F.pad(q.to(dtype), (0, 0, 0, n_pad - n)).reshape(b * h, n_pad, d)
            vx = F.pad(v.to(dtype), (0, 0, 0, n_pad - n)).reshape(b * h, n_pad, -1)
            valid = torch.ones(b, n, dtype=torch.bool, device=q.device) if mask is None else mask
            valid = F.pad(valid, (0, n_pad - n), value=False)
            valid = valid[:, None, :].expand(b, h, n_pad).reshape(b * h, n_pad, 1)
            pos_q = order.unflatten(2, (chunks, c))  # [G, R, chunks, c]
            pos_k = _window(pos_q.unsqueeze(-1))[..., 0]  # own + previous chunk [G,R,chunks,2c]
            keys = pos_k.flatten(2)  # the windows' rows gathered at once, no copy to concatenate
            qs = _gather_rows(x * (1.0 / math.sqrt(d)), order).unflatten(2, (chunks, c))
            ks = _gather_rows(F.normalize(x, dim=-1), keys).unflatten(2, (chunks, 2 * c))
            vs = _gather_rows(vx, keys).unflatten(2, (chunks, 2 * c))
            ok = _gather_rows(valid, keys).unflatten(2, (chunks, 2 * c))[..., 0]

        with self.stage("chunk_attention"):
            scores = qs @ ks.transpose(-1, -2)  # [G, R, chunks, c, 2c], scaled by 1/sqrt(d)
            scores.masked_fill_(~_allowed(ok, c, chunks), torch.finfo(dtype).min)
            lse = scores.logsumexp(-1, keepdim=True)
            weights = torch.softmax(scores, -1)
            out = (weights @ vs).flatten(2, 3)  # sorted order [G, R, n_pad, dv]

        with self.stage("unsort"):
            out = out.gather(2, undo.unsqueeze(-1).expand_as(out))
            lse = lse.flatten(2, 4).gather(2, undo)
        return out, lse, weights, pos_k, order

    def forward(self, q, k, v, mask=None):
        b, h, n, _ = q.shape
        out, lse, _, _, _ = self._attend(q, v, mask, self._call(advance=True))
        with self.stage("combine"):
            mix = torch.softmax(lse, dim=1).unsqueeze(-1)  # rounds' log-sum-exp weights
            y = (out * mix).sum(1)[:, :n].reshape(b, h, n, -1)
            return zero_masked_rows(y.to(v.dtype), mask)

    def cost(self, shape: Shape) -> dict[str, Cost]:
        """With P = B H, R rounds, chunk length c, n_pad and b_n = n_buckets (`layout`), in
        float32 at least: hash, the rotations' R n d b_n / 2 multiply-adds a plane
        (2 P R n d b_n / 2 matmul), P R n (b_n + 3) other (max and min over the b_n / 2
        projections, the sign test), codes written, its working set one block of
        projections (HASH_BLOCK floats at most); sort, P R n_pad (log2 n_pad + 2) other
        (the argsort's comparisons, its keys) and 4 P n_pad d (scaling, normalising the
        keys), the sorted queries and the windows' keys and values (2 n_pad rows a round)
        written; chunk_attention, each of the R n_pad queries against its 2c keys,
        4 P R n_pad c (d + dv) matmul, 11 other a score (key rule, fill, log-sum-exp,
        softmax) and 2 a row, scores and weights written and read back; unsort, the
        outputs and log-sum-exps gathered back; combine, P R n_pad (5 + 2 dv) other (the
        rounds' softmax, weighting, sum). Backward: `autograd_backward` of sort (without
        the argsort), chunk_attention, unsort and combine; the hash has no gradient. The
        mask's work is not counted."""
        n, d, dv, size = shape.n, shape.dim, shape.dv, shape.itemsize
        c, rounds = int(self.values["bucket"]), int(self.values["hashes"])
        n_pad, chunks, n_buckets = layout(n, c)
        half = n_buckets // 2
        work = 8 if size == 8 else 4
        planes = shape.planes
        step = max(1, HASH_BLOCK // (planes * rounds * half))
        rows = shape.elements(rounds * n_pad)  # sorted queries of all planes and rounds
        scores = rows * 2 * c
        gathers = Cost(
            0.0,
            shape.elements(4 * n_pad * d),
            shape.bytes(n * (d + dv)) + rows * (3 * d + 2 * dv) * work,
        )
        forward = {
            "hash": Cost(
                rounds * matmul(planes, n, d, half),
                shape.elements(rounds * n * (2 * half + 3)),
                shape.bytes(n * d) + shape.heads * rounds * d * half * 4 + rows * 8,
                float(planes * rounds * half * min(step, n) * 4),
            ),
            "sort": gathers + Cost(0.0, rows * (math.log2(max(n_pad, 2)) + 2), rows * 3 * 8.0),
            "chunk_attention": Cost(
                matmul(planes * rounds * chunks, c, d, 2 * c)
                + matmul(planes * rounds * chunks, c, 2 * c, dv),
                11.0 * scores + 2.0 * rows,
                (rows * (3 * d + 3 * dv + 1) + 4 * scores) * work + rows * 2 * c,
            ),
            "unsort": Cost(0.0, 0.0, rows * (2 * dv + 2) * work + rows * 8),
            "combine": Cost(
                0.0, rows * (5.0 + 2 * dv), rows * (dv + 1) * work + shape.bytes(n * dv)
            ),
        }
        costs = dict(forward) if shape.forward else {}
        if shape.backward:
            differentiated = [gathers] + [
                forward[s] for s in ("chunk_attention", "unsort", "combine")
            ]
            costs["backward"] = autograd_backward(differentiated)
        return costs

    def attention_map(self, q, k, mask=None):
        """Dense [B, H, n, n] weights the last forward's rotations give (small n): each
        round's window weights scattered to their keys, times the round's weight."""
        b, h, n, _ = q.shape
        c = self.values["bucket"]
        n_pad, chunks, _ = layout(n, c)
        call = self._call(advance=False)
        _, lse, weights, pos_k, order = self._attend(q, q[..., :1], mask, call)
        mix = torch.softmax(lse, dim=1)  # [G, R, n_pad] in token order
        g = weights.shape[0]
        rows = order.unflatten(2, (chunks, c)).unsqueeze(-1).expand_as(weights)
        cols = pos_k.unsqueeze(-2).expand_as(weights)
        w = weights * mix.gather(2, order).unflatten(2, (chunks, c)).unsqueeze(-1)
        dense = torch.zeros(g, n_pad * n_pad, dtype=w.dtype, device=w.device)
        flat = (rows * n_pad + cols).reshape(g, -1)
        dense.scatter_add_(1, flat, w.reshape(g, -1))
        dense = dense.view(g, n_pad, n_pad)[:, :n, :n]
        return dense.reshape(b, h, n, n).to(q.dtype)

    def predicted_bytes(self, batch, heads, n, d, itemsize):
        c, rounds = self.values["bucket"], self.values["hashes"]
        n_pad = layout(n, c)[0]
        return batch * heads * rounds * n_pad * (4 * c + 3 * d) * 4
