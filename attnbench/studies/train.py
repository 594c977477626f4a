"""Training the byte-level masked language model (`attnbench.nn.mlm`) with an attention
backend: any backend with a backward pass, so that models trained with different attentions
can be set side by side (training parity), and YOSO's Q, K, V can be read from a model
trained with YOSO.

Objective: BERT's masked language modelling. Each step masks MASK_SHARE of the bytes; of
those, 80 % become MASK, 10 % a random byte and 10 % stay, and the loss is the cross-entropy
on the masked bytes alone. Step s reads `tokens` bytes as batch = tokens / n sequences of
length n = lengths[s mod len(lengths)], each from a random offset of the training text.
Adam with a linear warm-up and a cosine decay, gradients clipped at norm 1. A step's
`seconds` count training alone (evaluation excluded), so curves against wall time compare
backends' training costs.

Evaluation reads the held-out text (never trained on) in contiguous windows of the longest
training length, with masks drawn from a fixed seed, so every evaluation scores the same
positions. The headline is the loss on [MASK] positions: at a kept or random byte the input
itself is a strong hint (a model that copies its input scores 0.98 on kept bytes), so only
[MASK] positions show what the model learned from context. The three kinds of masked
position are scored apart. Held-out bytes inside a SNIPPET-byte chunk that also occurs
verbatim in the training text are not scored (their share is reported): a model could
recall them rather than infer them. Baselines on the same positions: the unigram model
(the training text's byte frequencies: its loss, and the accuracy of its most frequent
byte) and copy-or-most-frequent (the input byte unless it is MASK, else the most frequent).
A YOSO-trained model is scored with YOSO's expectation (the paper's inference) and with its
sampled attention; any other model with its own backend.

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
EVAL_LENGTH = 4096  # the longest evaluation window
EVAL_SEED = 12345
SNIPPET = 32  # bytes of a held-out chunk looked up verbatim in the training text
KINDS = ("mask", "random", "kept")  # masked positions by what the input shows there


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
    # training seconds after which a run stops early, evaluated at the step it stopped; the
    # schedule stays that of `steps`, so a stopped run matches a whole one step for step
    max_seconds: float | None = None

    def learning_rate(self, step: int) -> float:
        """Linear warm-up over `warmup` steps, then a cosine decay to a tenth."""
        if step < self.warmup:
            return self.lr * (step + 1) / self.warmup
        progress = (step - self.warmup) / max(1, self.steps - self.warmup)
        return self.lr * (0.1 + 0.45 * (1 + math.cos(math.pi * progress)))

    def eval_steps(self) -> set[int]:
        """The steps (1-based counts of steps done) after which the held-out text is scored."""
        return {round(self.steps * (i + 1) / self.evals) for i in range(self.evals)}


def seen_in_training(held_out: bytes, text: bytes) -> torch.Tensor:
    """Per held-out byte: whether its SNIPPET-byte chunk (chunks from the start, the last one
    shorter) occurs verbatim in the training text."""
    seen = torch.zeros(len(held_out), dtype=torch.bool)
    for start in range(0, len(held_out), SNIPPET):
        chunk = held_out[start : start + SNIPPET]
        seen[start : start + len(chunk)] = text.find(chunk) >= 0
    return seen


@dataclass
class HeldOut:
    """The held-out text as ids, which of its bytes are seen in training, and the training
    text's byte log-frequencies (add-one), the unigram baseline."""

    ids: torch.Tensor
    seen: torch.Tensor
    unigram: torch.Tensor  # [256] log-probabilities

    @classmethod
    def of(cls, text: bytes, held_out: bytes) -> HeldOut:
        counts = torch.bincount(as_ids(text), minlength=256).double() + 1
        unigram = (counts / counts.sum()).log()
        return cls(as_ids(held_out), seen_in_training(held_out, text), unigram)

    @property
    def most_frequent(self) -> int:
        return int(self.unigram.argmax())


def position_kinds(inputs: torch.Tensor, targets: torch.Tensor) -> dict[str, torch.Tensor]:
    """Masked positions by kind: the input shows MASK, a byte not the target ("random"), or
    the target ("kept"; a random byte that happens to be the target counts here: the model
    cannot tell them apart)."""
    masked = targets >= 0
    return {
        "mask": masked & (inputs == MASK),
        "random": masked & (inputs != MASK) & (inputs != targets),
        "kept": masked & (inputs == targets),
    }


def score(model: MaskedLM, held: HeldOut, length: int) -> dict[str, float]:
    """Held-out scores under the model's current attention, windows of `length`, masks of
    EVAL_SEED, unseen positions only: `<kind>_loss` and `<kind>_accuracy` per kind of masked
    position and over all of them (`loss`, `accuracy`); the unigram baseline's loss and
    accuracy on [MASK] positions; copy-or-most-frequent's accuracy over all masked
    positions; and `seen_share`, the masked positions left out as seen in training."""
    gen = torch.Generator().manual_seed(EVAL_SEED)
    usable = len(held.ids) // length * length
    windows, seen = held.ids[:usable].view(-1, length), held.seen[:usable].view(-1, length)
    sums: dict[str, float] = {}

    def add(key: str, value) -> None:
        sums[key] = sums.get(key, 0.0) + float(value)

    with torch.no_grad():
        for window, window_seen in zip(windows, seen, strict=True):
            inputs, targets = mask_bytes(window[None], gen)
            inputs, targets = inputs[0], targets[0]
            add("masked", (targets >= 0).sum())
            targets = torch.where(window_seen, torch.full_like(targets, -100), targets)
            logits = model(inputs[None])[0]
            nll = F.cross_entropy(logits, targets.clamp_min(0), reduction="none")
            hit = logits.argmax(-1) == targets
            kinds = position_kinds(inputs, targets)
            for kind, where in kinds.items():
                add(f"{kind}_count", where.sum())
                add(f"{kind}_loss", nll[where].sum())
                add(f"{kind}_hits", hit[where].sum())
            where = kinds["mask"]
            add("unigram_loss", -held.unigram[targets[where]].sum())
            add("unigram_hits", (targets[where] == held.most_frequent).sum())
            guess = torch.where(inputs == MASK, held.most_frequent, inputs)
            add("copy_hits", (guess == targets)[targets >= 0].sum())
    counts = {kind: max(sums[f"{kind}_count"], 1.0) for kind in KINDS}
    scored = sum(sums[f"{kind}_count"] for kind in KINDS)
    total = max(scored, 1.0)
    out = {}
    for kind in KINDS:
        out[f"{kind}_loss"] = sums[f"{kind}_loss"] / counts[kind]
        out[f"{kind}_accuracy"] = sums[f"{kind}_hits"] / counts[kind]
    out["loss"] = sum(sums[f"{kind}_loss"] for kind in KINDS) / total
    out["accuracy"] = sum(sums[f"{kind}_hits"] for kind in KINDS) / total
    out["unigram_mask_loss"] = sums["unigram_loss"] / counts["mask"]
    out["unigram_mask_accuracy"] = sums["unigram_hits"] / counts["mask"]
    out["copy_accuracy"] = sums["copy_hits"] / total
    out["seen_share"] = 1.0 - scored / max(sums["masked"], 1.0)
    out["scored"] = scored
    return out


def is_yoso(backend: Backend) -> bool:
    """A YOSO-m backend: its model infers with YOSO's expectation at its tau."""
    return backend.name == "yoso"


def config_for(backend: Backend, config: MLMConfig) -> MLMConfig:
    """The model's config with the tau its inference needs (None but for YOSO)."""
    from dataclasses import replace

    tau = backend.values.get("tau") if is_yoso(backend) else None
    return replace(config, tau=tau)


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
    ids = as_ids(text)
    if max(run.lengths) > min(len(ids), run.config.positions):
        raise ValueError("a training length exceeds the text or the model's positions")
    held = HeldOut.of(text, held_out)
    model = MaskedLM(config_for(run.backend, run.config), run.backend)
    optimizer = torch.optim.Adam(model.parameters(), lr=run.lr)
    evaluate = partial(evaluation, model, held, run)
    log, trained = [], 0.0
    for step in range(run.steps):
        started = time.perf_counter()
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
        value = loss.item()
        trained += time.perf_counter() - started
        entry = {"backend": run.backend.spec, "step": step + 1, "n": n, "batch": batch,
                 "lr": run.learning_rate(step), "loss": value, "seconds": trained}  # fmt: skip
        stop = run.max_seconds is not None and trained >= run.max_seconds
        if step + 1 in run.eval_steps() or stop:
            entry.update(evaluate())
        log.append(entry)
        if on_step is not None:
            on_step(entry)
        if stop:
            break
    return model, log


def evaluation(model: MaskedLM, held: HeldOut, run: Training) -> dict:
    """Held-out scores (`score`'s keys, prefixed `heldout_`) with the model's inference
    attention: YOSO's expectation for a YOSO model, whose scores with its sampled attention
    follow as `heldout_sampled_*`; the backend itself otherwise. The model is left training
    with its backend."""
    model.eval()
    length = min(EVAL_LENGTH, run.config.positions, max(run.lengths), len(held.ids))
    yoso = is_yoso(run.backend)
    if yoso:
        model.set_attention(partial(expected_attention, tau=model.config.tau))
    scores = {f"heldout_{k}": v for k, v in score(model, held, length).items()}
    if yoso:
        model.set_attention(run.backend)
        sampled = score(model, held, length)
        scores |= {f"heldout_sampled_{k}": sampled[k] for k in ("mask_loss", "mask_accuracy")}
    model.train()
    return scores
