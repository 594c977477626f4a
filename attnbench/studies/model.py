"""The whole-model efficiency study (YOSO Fig. 7): training cost per instance vs length.

A small Transformer encoder, pre-LN (each sublayer reads LayerNorm(x) and adds its output to
x; a final LayerNorm before the output layer), embeds random token ids, runs `layers` blocks
of multi-head self-attention through a pluggable backend (called on q, k, v of shape
[batch, heads, n, width / heads]) and a `hidden`-wide GELU feed-forward layer, and predicts
random target tokens through the tied embedding (cross-entropy). A training step is forward,
loss, backward and an Adam step.

One case is one backend at one length n. As in the paper, the case uses the largest batch
that fits the memory budget: batches double from 1 while a step fits, then bisection between
the last batch that fitted and the first that did not finds the largest exactly (capped by
`max_batch`). A batch fits when one training step's total peak memory (model, gradients,
optimizer state, inputs, and the step's own peak) is within the budget and no out-of-memory
is raised; an out-of-memory is caught and counts as not fitting. At that batch, `warmup`
steps and then `steps` timed steps; the paper's per-instance figures are the mean step time
divided by the batch and the step's total peak memory divided by the batch. The peak
reported is the one the search measured at the chosen batch, the measurement that admitted
it, not a second one: a step's peak varies between runs, and a new measurement could
contradict "the largest batch that fits".

The two time rows carry the verdict the `time` study gives its cases: `spread` (IQR / median
of the step times), the host's conditions around the timed steps (CPU wait, load, clock) and
`stable`, false when the spread is above `max_spread` or the threads waited for a CPU, since
a noisy or starved step time can make the time per instance fall with n in one run; None
(not judged) for a single step, which has no spread.

Invariants: a row's `time_per_instance_ms` is its `step_ms` / batch and its
`peak_mib_per_instance` is its `peak_mib` / batch; `peak_mib` is within the memory budget;
backends without a backward pass are skipped with that reason (the case's mode is "train").
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import partial

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from attnbench.backends import Backend
from attnbench.case import Case, CaseInputs
from attnbench.inputs import Inputs
from attnbench.measure import DEFAULT_MAX_SPREAD, conditions, is_cuda
from attnbench.measure.memory import available_bytes, peak_memory
from attnbench.measure.timing import sample_spread
from attnbench.nn.encoder import Block, ModelConfig
from attnbench.results.schema import Row
from attnbench.run.study import Measure, Study, case_row
from attnbench.run.worker import HEADROOM, classify, release_memory

MIB = 1024 * 1024
MODE = "train"  # forward, loss, backward, optimizer step: backends need a backward
VOCAB = 512  # random token ids are drawn from this many
LEARNING_RATE = 1e-4
METRICS = ("time_per_instance_ms", "peak_mib_per_instance", "step_ms", "peak_mib", "batch")


class Encoder(nn.Module):
    """Token and learned position embeddings, `layers` pre-LN blocks, a final LayerNorm and
    logits over the vocabulary through the tied token embedding: [batch, n] ids ->
    [batch, n, vocab]."""

    def __init__(self, config: ModelConfig, backend: Backend, n: int):
        super().__init__()
        self.tokens = nn.Embedding(config.vocab, config.width)
        self.positions = nn.Parameter(torch.randn(n, config.width) * 0.02)
        self.blocks = nn.ModuleList(Block(config, backend) for _ in range(config.layers))
        self.norm = nn.LayerNorm(config.width)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.tokens(ids) + self.positions[: ids.shape[1]]
        for block in self.blocks:
            x = block(x)
        return self.norm(x) @ self.tokens.weight.T


class Trainer:
    """One backend's encoder at length n with its Adam optimizer, trained on random ids."""

    def __init__(self, config: ModelConfig, backend: Backend, n: int, device: str, seed: int):
        torch.manual_seed(seed)
        self.config, self.n, self.device, self.seed = config, n, device, seed
        self.model = Encoder(config, backend, n).to(device)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=LEARNING_RATE)

    def batch(self, size: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Random token ids and random targets, [size, n] each, drawn from the case's seed."""
        gen = torch.Generator().manual_seed(self.seed)
        ids = torch.randint(self.config.vocab, (2, size, self.n), generator=gen)
        ids = ids.to(self.device)
        return ids[0], ids[1]

    def step(self, ids: torch.Tensor, targets: torch.Tensor) -> float:
        """One training step: forward, cross-entropy, backward, optimizer step."""
        self.optimizer.zero_grad(set_to_none=True)
        logits = self.model(ids)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
        loss.backward()
        self.optimizer.step()
        return loss.detach()

    def state_bytes(self, *tensors: torch.Tensor) -> int:
        """Bytes held between steps: parameters, gradients, optimizer state, `tensors`."""
        held = [*self.model.parameters()]
        held += [p.grad for p in self.model.parameters() if p.grad is not None]
        for state in self.optimizer.state.values():
            held += [t for t in state.values() if isinstance(t, torch.Tensor)]
        held += tensors
        return sum(t.numel() * t.element_size() for t in held)

    def release(self) -> None:
        """Drop gradients (and a failed step's leftovers) before the next try."""
        self.optimizer.zero_grad(set_to_none=True)
        release_memory(self.device)


def step_bytes(trainer: Trainer, batch: int) -> tuple[int, str]:
    """Total peak bytes of one training step at `batch` and how the step's share was
    measured: what is held before the step (model, optimizer state, inputs) plus the step's
    peak above it. A monkeypatch point for tests."""
    ids, targets = trainer.batch(batch)
    held = trainer.state_bytes(ids, targets)
    peak = peak_memory(lambda: trainer.step(ids, targets), trainer.device)
    return held + peak.bytes, peak.method


# ----------------------------------------------------------------------------- batch search


def search_batch(
    fits: Callable[[int], bool], max_batch: int, report: Callable[[str], None] = lambda _: None
) -> int:
    """The largest batch in 1..max_batch for which `fits` holds (0 if not even 1 fits),
    assuming fitting is monotone in the batch: doubling from 1, then bisection between the
    last batch that fitted and the first that did not."""
    if not fits(1):
        return 0
    good, bad = 1, None
    while bad is None and good < max_batch:
        trial = min(2 * good, max_batch)
        report(f"batch {good} fits, trying {trial}")
        if fits(trial):
            good = trial
        else:
            bad = trial
    while bad is not None and bad - good > 1:
        trial = (good + bad) // 2
        report(f"batch {good} fits, {bad} does not, trying {trial}")
        if fits(trial):
            good = trial
        else:
            bad = trial
    return good


@dataclass
class Fit:
    """`fits(batch)` for one trainer: a step within `budget` bytes and no out-of-memory.
    Keeps the measured peaks, and never runs a batch whose peak, extrapolated linearly from
    a measured one, is above the memory free now (on the CPU that would not fail cleanly)."""

    trainer: Trainer
    budget: int
    measured: dict[int, int] = field(default_factory=dict)
    method: str = ""

    def __call__(self, batch: int) -> bool:
        below = [b for b in self.measured if b < batch]
        if below:
            b = max(below)
            growth = self.measured[b] * (batch / b - 1)  # an upper bound: memory is affine
            if growth > HEADROOM * available_bytes(self.trainer.device):
                return False
        try:
            self.measured[batch], self.method = step_bytes(self.trainer, batch)
        except Exception as exc:  # noqa: BLE001 - out-of-memory only; the rest is re-raised
            if classify(exc)[0] != "oom":
                raise
            failed = True
        else:
            failed = False
        self.trainer.release()  # out of the except block: its traceback holds tensors
        return not failed and self.measured[batch] <= self.budget


# ----------------------------------------------------------------------------- the study


@dataclass
class ModelStudy(Study):
    """The study: every backend's encoder at every length. `report`, if set, sees the batch
    search inside a case as it goes (in this process)."""

    seqs: list[int]
    backends: list[Backend]
    config: ModelConfig = field(default_factory=ModelConfig)
    steps: int = 10
    warmup: int = 2
    memory_budget: int | None = None  # bytes; None: what the device has free at each case
    max_batch: int = 64
    device: str = "cpu"
    seed: int = 0
    max_spread: float = DEFAULT_MAX_SPREAD  # IQR / median above this marks a case unstable
    report: Callable[[str], None] | None = field(default=None, repr=False, compare=False)

    @property
    def measure(self) -> Measure:
        return model_measure(self.report)

    @property
    def cases(self) -> list[Case]:
        """Every backend at every length; `batch` 1 is the smallest a case can use (the
        rows give the batch found). `max_spread` is a setting only when not the default, so
        the case ids of runs made before it existed stay as they were."""
        config = self.config
        settings = {
            "layers": config.layers, "width": config.width, "hidden": config.hidden,
            "vocab": config.vocab, "steps": self.steps, "warmup": self.warmup,
            "memory_budget": self.memory_budget, "max_batch": self.max_batch,
        }  # fmt: skip
        if self.max_spread != DEFAULT_MAX_SPREAD:
            settings["max_spread"] = self.max_spread
        inputs = Inputs("random", 1, config.heads, config.head_dim)
        return [
            Case(
                study="model",
                backend=backend,
                inputs=inputs,
                n=n,
                grid=None,
                batch=1,
                heads=config.heads,
                dim=config.head_dim,
                dtype="float32",
                device=self.device,
                mode=MODE,
                seed=self.seed,
                settings=dict(settings),
            )  # fmt: skip
            for n in self.seqs
            for backend in self.backends
        ]


def config_of(case: Case) -> ModelConfig:
    s = case.settings
    return ModelConfig(s["layers"], s["width"], s["hidden"], case.heads, s["vocab"])


def measure(
    case: Case, inputs: CaseInputs, report: Callable[[str], None] | None = None
) -> list[Row]:
    """The largest batch within the budget, then the mean of `steps` timed training steps
    after `warmup` untimed ones; the peak is the search's at that batch, so never above the
    budget. Per-instance time and memory are per batch element. The search runs the step
    first, so a kernel's compilation never falls in the timed steps, even with no warm-up."""
    report = report or (lambda _: None)
    settings = case.settings
    release_memory(case.device)  # the earlier cases' cached blocks count as free
    budget = settings["memory_budget"]
    if budget is None:
        budget = int(HEADROOM * available_bytes(case.device))
    trainer = Trainer(config_of(case), case.backend, case.n, case.device, case.seed)
    fit = Fit(trainer, budget)
    batch = search_batch(fit, settings["max_batch"], lambda text: report(f"{case.title}: {text}"))
    if batch == 0:
        need = fit.measured.get(1)
        why = f"needs {need / MIB:.1f} MiB" if need is not None else "out of memory"
        raise MemoryError(f"batch 1 does not fit the {budget / MIB:.1f} MiB memory budget ({why})")
    report(f"{case.title}: batch {batch}, timing {settings['steps']} steps")
    ids, targets = trainer.batch(batch)
    for _ in range(settings["warmup"]):
        trainer.step(ids, targets)
    before = conditions.snapshot(case.device)
    samples = [_timed_step(trainer, ids, targets) for _ in range(settings["steps"])]
    around = conditions.case_conditions(before, conditions.snapshot(case.device))
    trainer.release()
    total = fit.measured[batch]  # what admitted the batch: within the budget by construction
    note = f"batch capped at --max-batch {batch}" if batch == settings["max_batch"] else ""
    verdict = stability(samples, around, settings.get("max_spread", DEFAULT_MAX_SPREAD))
    return model_rows(case, batch, samples, total, fit.method, budget, note, verdict)


def stability(samples_ms: list[float], around: dict, max_spread: float) -> dict:
    """The time rows' `stable`, `spread` and `conditions`, judged as the `time` study judges
    a case: unstable when the spread is above `max_spread` or the threads waited for a CPU
    (steady steps of a starved process are steadily slow); not judged (None) on one step."""
    spread = sample_spread(samples_ms) if len(samples_ms) > 1 else None
    if conditions.contended(around):
        stable = False
    else:
        stable = None if spread is None else spread <= max_spread
    return {"stable": stable, "spread": spread, "conditions": around}


def model_rows(
    case: Case, batch: int, samples_ms: list[float], peak_bytes: int, method: str,
    budget: int, note: str = "", verdict: dict | None = None,
) -> list[Row]:  # fmt: skip
    """The case's rows from a batch, its step times and its step's total peak memory; the
    two time rows carry `verdict` (`stability`)."""
    step = float(np.mean(samples_ms))
    p10, p90 = (float(np.percentile(samples_ms, q)) for q in (10, 90))
    timer = "cuda-synchronize" if is_cuda(case.device) else "perf_counter_ns"
    timed = dict(count=len(samples_ms), method=f"{timer}, mean of steps", reason=note)
    timed |= verdict or {}
    search = f"largest batch within {budget / MIB:.0f} MiB (doubling, bisection)"
    rows = [
        case_row(
            case, "time_per_instance_ms", value=step / batch, unit="ms", p10=p10 / batch,
            p90=p90 / batch, samples=[s / batch for s in samples_ms], **timed,
        ),
        case_row(
            case, "peak_mib_per_instance", value=peak_bytes / MIB / batch, unit="MiB", count=1,
            method=method, reason=note,
        ),
        case_row(case, "step_ms", value=step, unit="ms", p10=p10, p90=p90,
                 samples=list(samples_ms), **timed),
        case_row(case, "peak_mib", value=peak_bytes / MIB, unit="MiB", count=1, method=method,
                 reason=note),
        case_row(case, "batch", value=float(batch), unit="", count=1, method=search, reason=note),
    ]  # fmt: skip
    return [replace(row, batch=batch) for row in rows]


def _timed_step(trainer: Trainer, ids: torch.Tensor, targets: torch.Tensor) -> float:
    cuda = is_cuda(trainer.device)
    if cuda:
        torch.cuda.synchronize(trainer.device)
    start = time.perf_counter_ns()
    trainer.step(ids, targets)
    if cuda:
        torch.cuda.synchronize(trainer.device)
    return (time.perf_counter_ns() - start) / 1e6


def model_measure(report: Callable[[str], None] | None = None) -> Measure:
    """The study's Measure; `report` sees the batch search as it goes (in this process)."""
    fn = measure if report is None else partial(measure, report=report)
    return Measure(fn, "time_per_instance_ms", "ms")
