"""Generated inputs: `random` (Gaussian) and `clustered[:size=N]` (concentrated attention).

Both draw from a torch generator seeded with the trial seed, on the CPU, so the same seed
gives the same tensors everywhere.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from attnbench.errors import UsageError
from attnbench.inputs.base import Source, parse_options

CLUSTERS = 8  # clusters per head in `clustered` inputs
SPREAD = 0.3  # noise around a cluster centre, relative to the centre's length


def random_qkv(batch, heads, n, d, seed, gen_device="cpu"):
    gen = torch.Generator(gen_device).manual_seed(seed)
    return [torch.randn(batch, heads, n, d, generator=gen) for _ in range(3)]


def clustered_qkv(batch, heads, n, d, seed, size=None):
    """Queries and keys scattered tightly around a few shared centres, values Gaussian.

    Each token's query and key sit near the same random centre, so attention concentrates
    on the token's own cluster, as it does in trained models. Lengths are set so that
    q.k/sqrt(d) is about 4 cos(angle): softmax is peaked but not one-hot.

    size None: CLUSTERS clusters, tokens drawn into them at random, so a cluster holds about
    n / CLUSTERS tokens and the share of attention on it does not change with n. size s: s
    tokens per cluster (a random permutation cut into runs of s), ceil(n / s) clusters, so the
    attended cluster stays s tokens while the rest of the sequence grows.
    """
    gen = torch.Generator().manual_seed(seed)
    clusters = CLUSTERS if size is None else -(-n // size)
    centres = F.normalize(torch.randn(batch, heads, clusters, d, generator=gen), dim=-1)
    if size is None:
        which = torch.randint(CLUSTERS, (batch, heads, n), generator=gen)
    else:
        which = torch.argsort(torch.rand(batch, heads, n, generator=gen), dim=-1) // size
    base = torch.gather(centres, 2, which[..., None].expand(-1, -1, -1, d))
    scale = 2.0 * d**0.25

    def near_centre():
        noise = torch.randn(batch, heads, n, d, generator=gen) * (SPREAD / math.sqrt(d))
        return F.normalize(base + noise, dim=-1) * scale

    q, k = near_centre(), near_centre()
    v = torch.randn(batch, heads, n, d, generator=gen)
    return [q, k, v]


class RandomInputs(Source):
    """`random`: q, k and v standard Gaussian."""

    names = usage = ("random",)

    def draw(self, n, seed, grid):
        return random_qkv(self.batch, self.heads, n, self.dim, seed)


class ClusteredInputs(Source):
    """`clustered`: CLUSTERS clusters per head; `clustered:size=N`: clusters of N tokens."""

    names = ("clustered", "clustered:")
    usage = ("clustered", "clustered:size=N")

    def __init__(self, kind: str, batch: int, heads: int, dim: int):
        super().__init__(kind, batch, heads, dim)
        self.cluster_size = None
        if kind != "clustered":
            options = parse_options(kind.removeprefix("clustered:"), ("size",), "clustered")
            if options.get("size", 0) < 1:
                raise UsageError("--inputs clustered:size=N needs N >= 1 tokens per cluster")
            self.cluster_size = options["size"]

    def check_lengths(self, seqs: list[int], option: str = "--seq") -> None:
        """A cluster of `size` tokens needs n >= size: a larger one is the whole sequence,
        one cluster, which `size` does not mean."""
        size = self.cluster_size
        short = [n for n in seqs if size is not None and n < size]
        if short:
            raise UsageError(
                f"{option} {short[0]}: --inputs clustered:size={size} needs at least "
                f"{size} tokens, a cluster's"
            )

    def draw(self, n, seed, grid):
        return clustered_qkv(self.batch, self.heads, n, self.dim, seed, self.cluster_size)
