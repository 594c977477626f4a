"""A pre-LN Transformer encoder block whose attention is any callable on q, k, v.

Each sublayer reads LayerNorm(x) and adds its output to x. The attention call gets q, k, v
of shape [batch, heads, n, width / heads] and returns y of the same shape, so a backend, a
dense reference or the YOSO expectation can stand in without the block knowing which.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

Attend = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


@dataclass(frozen=True)
class ModelConfig:
    layers: int = 6
    width: int = 256
    hidden: int = 1024
    heads: int = 4
    vocab: int = 512

    @property
    def head_dim(self) -> int:
        return self.width // self.heads


class Attention(nn.Module):
    """Multi-head self-attention whose softmax(QK^T/sqrt(d))V is the `backend` call."""

    def __init__(self, config: ModelConfig, backend: Attend):
        super().__init__()
        self.heads, self.backend = config.heads, backend
        self.qkv = nn.Linear(config.width, 3 * config.width)
        self.out = nn.Linear(config.width, config.width)

    def project(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """q, k, v of hidden states x [batch, n, width]: [batch, heads, n, d] each."""
        batch, n, width = x.shape
        qkv = self.qkv(x).view(batch, n, 3, self.heads, width // self.heads)
        return qkv.permute(2, 0, 3, 1, 4).unbind(0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, n, width = x.shape
        q, k, v = self.project(x)
        y = self.backend(q.contiguous(), k.contiguous(), v.contiguous())
        return self.out(y.transpose(1, 2).reshape(batch, n, width))


class Block(nn.Module):
    """Pre-LN: x + attention(LN(x)), then x + feed-forward(LN(x))."""

    def __init__(self, config: ModelConfig, backend: Attend):
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(config.width), nn.LayerNorm(config.width)
        self.attention = Attention(config, backend)
        self.ff = nn.Sequential(
            nn.Linear(config.width, config.hidden),
            nn.GELU(),
            nn.Linear(config.hidden, config.width),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attention(self.norm1(x))
        return x + self.ff(self.norm2(x))
