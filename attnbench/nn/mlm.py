"""A byte-level masked language model: the encoder that `attnbench train` trains with YOSO
attention and whose queries, keys and values `--inputs model:yoso-mlm` reads.

Tokens are the bytes of UTF-8 text (256 ids) plus MASK, so no tokenizer is needed and the
embedding stays small. Positions are rotary (RoPE, Su et al. 2021) by default: q and k are
rotated by their position before the attention call, so a query's similarity to a key
depends on their offset and a head can attend to its neighbours from the first steps, under
any backend (a rotation keeps a row's length, so YOSO's angular hashes see it too). A model
with `rotary=False` adds sinusoidal positions to the embedding instead. Either way no
parameter depends on n, so the model reads any n <= positions as one contiguous sequence.
Blocks are the pre-LN blocks of `attnbench.nn.encoder`; logits go through the tied byte
embedding.

The attention is a callable: training passes a backend (a YOSO backend samples its hashes
per call); a YOSO-trained model infers with YOSO's expectation (`expected_attention`),
deterministic, as the YOSO paper takes the expectation at inference. A checkpoint holds the
configuration, the weights and the facts of its training; `load` rebuilds the model from it
alone.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from attnbench.nn.encoder import Attend, Block, ModelConfig

MASK = 256  # the id after the 256 bytes
VOCAB = 257


@dataclass(frozen=True)
class MLMConfig:
    """The masked language model's shape; `tau` is the YOSO tau it was trained with (the
    expectation at inference must use the same), None for a model trained without YOSO."""

    layers: int = 4
    width: int = 128
    hidden: int = 512
    heads: int = 2
    positions: int = 4096
    tau: int | None = 8
    rotary: bool = True

    @property
    def blocks(self) -> ModelConfig:
        return ModelConfig(self.layers, self.width, self.hidden, self.heads, VOCAB)


def sinusoids(n: int, width: int) -> torch.Tensor:
    """[n, width] sinusoidal positions (Vaswani et al.): sin in even, cos in odd columns."""
    position = torch.arange(n, dtype=torch.float64)[:, None]
    rates = torch.exp(torch.arange(0, width, 2, dtype=torch.float64) * (-math.log(1e4) / width))
    table = torch.zeros(n, width, dtype=torch.float64)
    table[:, 0::2] = torch.sin(position * rates)
    table[:, 1::2] = torch.cos(position * rates)
    return table.float()


def rotate(x: torch.Tensor) -> torch.Tensor:
    """RoPE on [..., n, d] rows: the pair (x_c, x_{c + d/2}) of row t is rotated by the angle
    t * 10000^(-2c/d), so <rotate(q)_i, rotate(k)_j> depends on i - j, not on i and j."""
    n, d = x.shape[-2], x.shape[-1]
    half = d // 2
    rates = 1e4 ** (-torch.arange(half, dtype=torch.float64, device=x.device) / half)
    angles = torch.arange(n, dtype=torch.float64, device=x.device)[:, None] * rates
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    first, second, rest = x[..., :half], x[..., half : 2 * half], x[..., 2 * half :]
    return torch.cat([first * cos - second * sin, first * sin + second * cos, rest], -1)


class Rotary:
    """An attention callable that rotates q and k by position (RoPE) before `attend`."""

    def __init__(self, attend: Attend):
        self.attend = attend

    def __call__(self, q, k, v):
        return self.attend(rotate(q), rotate(k), v)


def expected_attention(q, k, v, tau: int) -> torch.Tensor:
    """YOSO-E, l2(E V) with E = (1 - arccos(q^ k^T) / pi)^tau on l2-normalised q, k: the
    expectation of YOSO over hash functions, dense and deterministic."""
    cos = F.normalize(q, dim=-1) @ F.normalize(k, dim=-1).transpose(-1, -2)
    weights = (1.0 - torch.arccos(cos.clamp(-1.0, 1.0)) / math.pi) ** tau
    return F.normalize(weights @ v, dim=-1)


class MaskedLM(nn.Module):
    """[batch, n] byte ids (MASK where masked) -> [batch, n, VOCAB] logits."""

    def __init__(self, config: MLMConfig, attend: Attend | None = None):
        super().__init__()
        self.config = config
        attend = attend or partial(expected_attention, tau=config.tau)
        if config.rotary:
            attend = Rotary(attend)
        # unit-norm byte and position vectors, so neither drowns the other and the tied
        # logits start near zero
        self.tokens = nn.Embedding(VOCAB, config.width)
        nn.init.normal_(self.tokens.weight, std=config.width**-0.5)
        positions = sinusoids(config.positions, config.width) * (2 / config.width) ** 0.5
        self.register_buffer("positions", positions, persistent=False)
        self.blocks = nn.ModuleList(Block(config.blocks, attend) for _ in range(config.layers))
        self.norm = nn.LayerNorm(config.width)

    def set_attention(self, attend: Attend) -> None:
        """Route every block's attention through `attend` (e.g. the expectation to infer)."""
        if self.config.rotary:
            attend = Rotary(attend)
        for block in self.blocks:
            block.attention.backend = attend

    def embed(self, ids: torch.Tensor) -> torch.Tensor:
        if ids.shape[1] > self.config.positions:
            raise ValueError(f"{ids.shape[1]} tokens; the model has {self.config.positions}")
        if self.config.rotary:
            return self.tokens(ids)
        return self.tokens(ids) + self.positions[: ids.shape[1]]

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.embed(ids)
        for block in self.blocks:
            x = block(x)
        return self.norm(x) @ self.tokens.weight.T

    @torch.no_grad()
    def qkv(self, ids: torch.Tensor, layer: int) -> list[torch.Tensor]:
        """Layer `layer`'s (0-based) queries, keys and values for ids [batch, n]: [batch,
        heads, n, d] each, as that layer's attention receives them."""
        x = self.embed(ids)
        for block in self.blocks[:layer]:
            x = block(x)
        block = self.blocks[layer]
        q, k, v = block.attention.project(block.norm1(x))
        if self.config.rotary:
            q, k = rotate(q), rotate(k)
        return [t.contiguous() for t in (q, k, v)]


def checkpoint_bytes(model: MaskedLM, facts: dict) -> bytes:
    """The checkpoint's bytes (configuration, weights, `facts` of the training), to be
    written in one step by the caller."""
    import io

    buffer = io.BytesIO()
    state = {k: t.detach().cpu().clone() for k, t in model.state_dict().items()}
    torch.save({"config": asdict(model.config), "state": state, "facts": facts}, buffer)
    return buffer.getvalue()


def read(path: Path) -> dict:
    """A checkpoint's configuration, weights and facts, unpickling tensors and plain data
    only (no code)."""
    from torch.torch_version import TorchVersion

    with torch.serialization.safe_globals([TorchVersion]):  # a version string in the facts
        return torch.load(path, map_location="cpu", weights_only=True)


def load(path: Path) -> tuple[MaskedLM, dict]:
    """The model a checkpoint holds, attending through the expectation, and its facts."""
    saved = read(path)
    # a checkpoint from before rotary positions has no `rotary` key: it added sinusoids
    model = MaskedLM(MLMConfig(**{"rotary": False, **saved["config"]}))
    model.load_state_dict(saved["state"])
    return model.eval(), saved["facts"]
