"""Q, K, V for the studies: Gaussian, clustered (concentrated attention), a trained model's
(`model:minilm`, see attnbench.inputs.models), or from a file.

All generators draw on the CPU from a seeded generator and then move to the device, so the
same seed gives the same inputs everywhere.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from attnbench.errors import UsageError

KINDS = ("random", "clustered", "clustered:size=N", "model:minilm")
FILE_SUFFIXES = (".npz", ".pt")
CLUSTERS = 8  # clusters per head in `clustered` inputs
SPREAD = 0.3  # noise around a cluster centre, relative to the centre's length


def parse_options(text: str, allowed: tuple[str, ...], kind: str) -> dict[str, int]:
    """`a=1,b=2` -> {"a": 1, "b": 2}: non-negative integers, known keys, each once."""
    options: dict[str, int] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        key, eq, value = item.partition("=")
        key = key.strip()
        if not eq or key not in allowed:
            raise UsageError(
                f"--inputs {kind}: bad option {item!r}; valid: "
                + ", ".join(f"{name}=N" for name in allowed)
            )
        if key in options:
            raise UsageError(f"--inputs {kind}: {key} given twice")
        if not value.strip().isdigit():
            raise UsageError(f"--inputs {kind}: {key} must be a non-negative integer")
        options[key] = int(value)
    return options


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


def load_qkv(path: Path) -> list[torch.Tensor]:
    """Read q, k, v from .npz or .pt; accept [n, d], [H, n, d] or [B, H, n, d]; validate."""
    path = Path(path)
    if path.suffix not in FILE_SUFFIXES:
        kinds = ", ".join((*KINDS, "blobs", "image:NAME", "svd:NAME", "three-blobs"))
        raise UsageError(f"--inputs: {path} is not a .npz or .pt file, nor one of {kinds}")
    if not path.is_file():
        raise UsageError(f"--inputs: file {path} does not exist")
    try:
        if path.suffix == ".npz":
            with np.load(path) as data:
                raw = {key: torch.from_numpy(data[key]) for key in data.files}
        else:
            raw = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - any unreadable file is the user's to fix
        raise UsageError(f"--inputs: cannot read {path}: {exc}") from None
    if not isinstance(raw, dict) or any(key not in raw for key in "qkv"):
        raise UsageError(f"--inputs: {path} must hold arrays named q, k and v")
    tensors = []
    for key in "qkv":
        try:
            t = torch.as_tensor(raw[key])
        except (TypeError, ValueError, RuntimeError):
            raise UsageError(f"--inputs: {key} in {path} is not a numeric array") from None
        if not t.is_floating_point():
            raise UsageError(f"--inputs: {key} in {path} is not a floating-point array")
        if t.dim() not in (2, 3, 4):
            raise UsageError(f"--inputs: {key} in {path} has {t.dim()} dims; want 2, 3 or 4")
        if t.numel() == 0:
            raise UsageError(f"--inputs: {key} in {path} is empty, shape {tuple(t.shape)}")
        while t.dim() < 4:
            t = t.unsqueeze(0)
        if not torch.isfinite(t).all():
            raise UsageError(f"--inputs: {key} in {path} contains NaN or inf")
        tensors.append(t)
    q, k, v = tensors
    if q.shape != k.shape or k.shape[:3] != v.shape[:3]:
        raise UsageError(
            f"--inputs: mismatched shapes in {path}: q {tuple(q.shape)}, k {tuple(k.shape)}, "
            f"v {tuple(v.shape)} (q and k must match; v must share batch, heads and n)"
        )
    return tensors


class Inputs:
    """A source of (q, k, v) for a given length and trial seed."""

    def __init__(self, kind: str, batch: int, heads: int, dim: int):
        self.kind, self.batch, self.heads, self.dim = kind, batch, heads, dim
        self.data = None  # not None: the source sets batch, heads and dim itself
        self.cluster_size = None
        if kind.startswith("clustered:"):
            options = parse_options(kind.removeprefix("clustered:"), ("size",), "clustered")
            if options.get("size", 0) < 1:
                raise UsageError("--inputs clustered:size=N needs N >= 1 tokens per cluster")
            self.cluster_size = options["size"]
        elif kind.startswith("model:"):
            from attnbench.inputs.models import ModelSource

            # a model's windows, computed on demand: `data` marks that its shape is fixed
            self.data = ModelSource(kind.removeprefix("model:"))
            self.batch, self.heads, self.dim = 1, self.data.heads, self.data.dim
            self.max_n = None
        elif self.on_grid:  # images: one picture, one head
            from attnbench.inputs.images import IMAGES

            name = kind.split(":", 1)[1] if ":" in kind else kind
            if kind not in ("blobs", "three-blobs") and name not in IMAGES:
                raise UsageError(f"--inputs: unknown image {name!r}; valid: {', '.join(IMAGES)}")
            self.batch = self.heads = 1
        elif kind not in ("random", "clustered"):
            self.data = load_qkv(Path(kind))
            _, self.heads, self.max_n, self.dim = self.data[0].shape
            self.batch = self.data[0].shape[0]

    @property
    def on_grid(self) -> bool:
        """Image inputs (blobs, image:NAME and the SCRAM figures' svd:NAME and three-blobs)
        exist only on an H x W grid."""
        return self.kind in ("blobs", "three-blobs") or self.kind.startswith(("image:", "svd:"))

    @property
    def fixed_shape(self) -> bool:
        """A file or a model sets batch, heads and dim; the options given are ignored."""
        return self.data is not None

    @property
    def is_model(self) -> bool:
        return self.kind.startswith("model:")

    @property
    def label(self) -> str:
        if self.is_model:
            return self.data.label
        return self.kind if self.data is None else Path(self.kind).name

    def check_lengths(self, seqs: list[int], option: str = "--seq") -> None:
        if self.data is not None and self.max_n is not None and max(seqs) > self.max_n:
            raise UsageError(
                f"{option}: {max(seqs)} is longer than the {self.max_n} tokens in {self.label}"
            )

    def make(
        self, n: int, seed: int, dtype: torch.dtype, device: str, grid=None
    ) -> list[torch.Tensor]:
        if self.on_grid:
            from attnbench.inputs.images import grid_qkv

            if grid is None:
                raise UsageError(f"--inputs {self.kind} needs --grid HxW")
            qkv = grid_qkv(self.kind, grid[0], grid[1], self.dim, seed)
        elif self.kind == "random":
            qkv = random_qkv(self.batch, self.heads, n, self.dim, seed)
        elif self.kind == "clustered" or self.cluster_size is not None:
            qkv = clustered_qkv(self.batch, self.heads, n, self.dim, seed, self.cluster_size)
        elif self.is_model:
            qkv = self.data.make(n, seed)
        else:
            qkv = [t[:, :, :n] for t in self.data]
        return [t.to(device=device, dtype=dtype).contiguous() for t in qkv]
