"""Q, K, V of a model trained with YOSO attention: `--inputs model:yoso-mlm[:layer=L,head=H]`.

The model is the byte-level masked language model that `attnbench train` trains with
yoso:m=32,tau=8 and YOSO's default backward in the training-parity run
(profiles/train-parity.toml, n = 1024); its checkpoint ships in the package. Its positions
are rotary, so it reads any n <= its positions (4096) bytes of held-out text, Python's
reference documentation never trained on, as one contiguous sequence: no windows joined.
Trial seed s reads the n bytes after seed s - 1's, wrapping at the text's end. Layers before
L attend with YOSO's expectation, the deterministic inference, so the same seed gives the
same Q, K, V.
"""

from __future__ import annotations

from pathlib import Path

import torch

from attnbench.errors import UsageError
from attnbench.inputs.base import Source, parse_options
from attnbench.inputs.checkpoint import build, read_checkpoint

NAME = "model:yoso-mlm"
CHECKPOINT = Path(__file__).resolve().parent / "data" / "yoso-mlm.pt"
DEFAULT_LAYER = 2  # 0-based, of 4: a middle layer, past the embedding-like first ones
OPTIONS = ("layer", "head")


class TrainedInputs(Source):
    """A YOSO-trained model's Q, K, V over contiguous held-out text. Cheap to build and to
    pickle: the checkpoint is checked when built (`inputs.checkpoint`), kept on first use."""

    names, usage = (NAME, f"{NAME}:"), (NAME,)
    fixed_shape = True

    def __init__(self, kind: str, batch: int, heads: int, dim: int, checkpoint=None):
        options = kind.removeprefix(NAME).removeprefix(":")
        opts = parse_options(options, OPTIONS, NAME)
        self.checkpoint = Path(checkpoint or CHECKPOINT)
        if not self.checkpoint.is_file():
            raise UsageError(f"--inputs {NAME}: no checkpoint at {self.checkpoint}")
        config, _ = read_checkpoint(self.checkpoint, f"--inputs {NAME}")
        self.layers, self.all_heads = config.layers, config.heads
        self.positions = config.positions
        self.layer = opts.get("layer", min(DEFAULT_LAYER, self.layers - 1))
        if self.layer >= self.layers:
            raise UsageError(f"--inputs {NAME}: layer must be 0..{self.layers - 1}")
        self.head = opts.get("head")
        if self.head is not None and self.head >= self.all_heads:
            raise UsageError(f"--inputs {NAME}: head must be 0..{self.all_heads - 1}")
        heads = 1 if self.head is not None else self.all_heads
        super().__init__(kind, 1, heads, config.width // self.all_heads)
        self._model = self._text = None

    def __getstate__(self):
        return {**self.__dict__, "_model": None, "_text": None}

    @property
    def label(self) -> str:
        head = "" if self.head is None else f" head={self.head}"
        return f"{NAME} layer={self.layer}{head} (contiguous text)"

    def check_lengths(self, seqs: list[int], option: str = "--seq") -> None:
        too_long = [n for n in seqs if n > self.positions]
        if too_long:
            raise UsageError(
                f"{option} {too_long[0]}: --inputs {NAME} reads at most {self.positions} "
                "tokens, the model's positions"
            )

    def _load(self) -> None:
        if self._model is None:
            from attnbench.nn.corpus import held_out_bytes

            self._model = build(*read_checkpoint(self.checkpoint, f"--inputs {NAME}"))
            self._text = torch.frombuffer(bytearray(held_out_bytes()), dtype=torch.uint8)

    def draw(self, n, seed, grid):
        """[1, heads, n, d] q, k, v of the n held-out bytes from offset seed * n."""
        self.check_lengths([n])
        self._load()
        offsets = (seed * n + torch.arange(n)) % len(self._text)
        ids = self._text[offsets].long()[None]
        qkv = self._model.qkv(ids, self.layer)
        if self.head is not None:
            qkv = [t[:, self.head : self.head + 1] for t in qkv]
        return [t.contiguous() for t in qkv]
