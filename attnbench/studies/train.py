"""Training the byte-level masked language model (`attnbench.nn.mlm`) with an attention
backend, YOSO in the paper's setting, so that its Q, K, V are those of a YOSO-trained model.

Objective: BERT's masked language modelling. Each step masks MASK_SHARE of the bytes; of
those, 80 % become MASK, 10 % a random byte and 10 % stay, and the loss is the cross-entropy
on the masked bytes alone. Step s reads `tokens` bytes as batch = tokens / n sequences of
length n = lengths[s mod len(lengths)], each from a random offset of the training text, so
the model sees every length it will be read at, up to its positions. Adam with a linear
warm-up and a cosine decay, gradients clipped at norm 1.

Evaluation reads the held-out text (never trained on) in contiguous windows of EVAL_LENGTH
bytes with masks drawn from a fixed seed, so every evaluation scores the same positions;
the unigram baseline predicts the training text's most frequent byte everywhere.

Everything random is drawn from `seed` (and the backend's own seed), so the same command on
the same software gives the same losses.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial

import torch
import torch.nn.functional as F

from attnbench.backends import Backend
from attnbench.nn.mlm import MASK, MaskedLM, MLMConfig, expected_attention

MASK_SHARE = 0.15
EVAL_LENGTH = 4096
EVAL_SEED = 12345


def mask_bytes(ids: torch.Tensor, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """BERT's masking of [batch, n] byte ids: (inputs, targets), targets -100 where not
    masked. At least one position of the batch is masked."""
    draw = torch.rand(ids.shape, generator=gen)
    masked = draw < MASK_SHARE
    if not masked.any():
        masked.view(-1)[0] = True
    how = torch.rand(ids.shape, generator=gen)
    inputs = ids.clone()
    inputs[masked & (how < 0.8)] = MASK
    swap = masked & (how >= 0.8) & (how < 0.9)
    inputs[swap] = torch.randint(256, ids.shape, generator=gen)[swap]
    targets = torch.where(masked, ids, torch.full_like(ids, -100))
    return inputs, targets


def as_ids(text: bytes) -> torch.Tensor:
    return torch.frombuffer(bytearray(text), dtype=torch.uint8).long()


@dataclass
class Training:
    """One training run: the model's shape, the backend it attends with, the schedule."""

    backend: Backend
    config: MLMConfig = field(default_factory=MLMConfig)
    steps: int = 4000
    tokens: int = 8192
    lengths: tuple[int, ...] = (256, 512, 1024, 2048, 4096)
    lr: float = 1e-3
    warmup: int = 100
    evals: int = 5  # evaluations on the held-out text, evenly spaced, the last at the end
    seed: int = 0

    def learning_rate(self, step: int) -> float:
        """Linear warm-up over `warmup` steps, then a cosine decay to a tenth."""
        if step < self.warmup:
            return self.lr * (step + 1) / self.warmup
        progress = (step - self.warmup) / max(1, self.steps - self.warmup)
        return self.lr * (0.1 + 0.45 * (1 + math.cos(math.pi * progress)))

    def eval_steps(self) -> set[int]:
        """The steps (1-based counts of steps done) after which the held-out text is scored."""
        return {round(self.steps * (i + 1) / self.evals) for i in range(self.evals)}


@dataclass
class Score:
    """Masked-byte loss and accuracy over the held-out text, and the unigram baseline's."""

    loss: float
    accuracy: float
    unigram_accuracy: float
    masked: int


def score(model: MaskedLM, held_out: torch.Tensor, unigram: int, length: int) -> Score:
    """Masked-byte loss and accuracy over the held-out text in windows of `length`, with
    the masks of EVAL_SEED, under the model's current attention."""
    gen = torch.Generator().manual_seed(EVAL_SEED)
    usable = held_out[: len(held_out) // length * length].view(-1, length)
    losses, hits, base, count = 0.0, 0, 0, 0
    with torch.no_grad():
        for window in usable:
            inputs, targets = mask_bytes(window[None], gen)
            logits = model(inputs)[0]
            where = targets[0] >= 0
            losses += F.cross_entropy(logits[where], targets[0][where], reduction="sum").item()
            hits += (logits[where].argmax(-1) == targets[0][where]).sum().item()
            base += (targets[0][where] == unigram).sum().item()
            count += int(where.sum())
    return Score(losses / count, hits / count, base / count, count)


def train(
    run: Training,
    text: bytes,
    held_out: bytes,
    on_step: Callable[[dict], None] | None = None,
) -> tuple[MaskedLM, list[dict]]:
    """Train a fresh model on `text`; returns it and the log, one dict per step (held-out
    scores on the evaluation steps). `on_step` sees each entry as it is made."""
    torch.manual_seed(run.seed)
    gen = torch.Generator().manual_seed(run.seed)
    ids, held = as_ids(text), as_ids(held_out)
    if max(run.lengths) > min(len(ids), run.config.positions):
        raise ValueError("a training length exceeds the text or the model's positions")
    unigram = int(torch.bincount(ids, minlength=256).argmax())
    model = MaskedLM(run.config, run.backend)
    optimizer = torch.optim.Adam(model.parameters(), lr=run.lr)
    evaluate = partial(evaluation, model, held, unigram, run)
    log, started = [], time.perf_counter()
    for step in range(run.steps):
        n = run.lengths[step % len(run.lengths)]
        batch = max(1, run.tokens // n)
        starts = torch.randint(len(ids) - n + 1, (batch,), generator=gen)
        inputs, targets = mask_bytes(ids[starts[:, None] + torch.arange(n)], gen)
        for group in optimizer.param_groups:
            group["lr"] = run.learning_rate(step)
        optimizer.zero_grad(set_to_none=True)
        logits = model(inputs)
        loss = F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        entry = {"step": step + 1, "n": n, "batch": batch, "lr": run.learning_rate(step),
                 "loss": loss.item(), "seconds": time.perf_counter() - started}  # fmt: skip
        if step + 1 in run.eval_steps():
            entry.update(evaluate())
        log.append(entry)
        if on_step is not None:
            on_step(entry)
    return model, log


def evaluation(model: MaskedLM, held: torch.Tensor, unigram: int, run: Training) -> dict:
    """Held-out scores with the expectation (deterministic inference) and with the training
    backend's sampled attention; the model is left training with its backend."""
    model.eval()
    length = min(EVAL_LENGTH, run.config.positions, len(held))
    model.set_attention(partial(expected_attention, tau=run.config.tau))
    expected = score(model, held, unigram, length)
    model.set_attention(run.backend)
    sampled = score(model, held, unigram, length)
    model.train()
    return {
        "heldout_loss": expected.loss,
        "heldout_accuracy": expected.accuracy,
        "heldout_accuracy_sampled": sampled.accuracy,
        "unigram_accuracy": expected.unigram_accuracy,
    }
