"""Training runs (`attnbench train`) drawn and tabled: held-out [MASK] loss against steps and
against training seconds, one curve a backend, and a table of where each backend got to.
They read a training log only, never train."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from attnbench.views.figures import atomic_save, plt
from attnbench.views.labels import backend_label

HEADLINE = "heldout_mask_loss"


def is_training_log(path: Path) -> bool:
    """A CSV whose header has train's held-out [MASK] loss column (not a study's rows)."""
    if path.suffix.lower() != ".csv":
        return False
    try:
        return HEADLINE in pd.read_csv(path, nrows=0).columns
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError):
        return False  # not a training log; the study reader says what is wrong with it


NUMBERS = ("step", "seconds")  # every row's
SCORES = (  # an evaluation row's: what the figure and the table read
    HEADLINE, "heldout_mask_accuracy", "heldout_random_accuracy", "heldout_kept_accuracy",
    "heldout_unigram_mask_loss", "heldout_unigram_mask_accuracy", "heldout_copy_accuracy",
    "heldout_seen_share",
)  # fmt: skip


def read_log(path: Path) -> pd.DataFrame:
    """A training log checked before it is drawn or tabled: a backend, step and seconds in
    every row, finite and not negative, and at least one evaluation row whose scores are
    finite; ValueError naming the first problem otherwise, since an edited or cut log
    ended in a KeyError deep in the figure."""
    try:
        log = pd.read_csv(path)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path}: not a training log ({' '.join(str(exc).split())})") from None
    missing = [c for c in ("backend", *NUMBERS, *SCORES) if c not in log]
    if missing:
        raise ValueError(f"{path}: training log without the column(s) {', '.join(missing)}")
    for column in NUMBERS:
        values = pd.to_numeric(log[column], errors="coerce")
        if values.isna().any() or not values.map(math.isfinite).all() or (values < 0).any():
            raise ValueError(f"{path}: {column} must be a finite number >= 0 in every row")
        log[column] = values
    if log["backend"].isna().any():
        raise ValueError(f"{path}: a row without a backend")
    held = log.dropna(subset=[HEADLINE])
    if held.empty:
        raise ValueError(f"{path}: the training log has no held-out [MASK] scores")
    for column in SCORES:
        values = pd.to_numeric(held[column], errors="coerce")
        if not values.map(math.isfinite).all():
            raise ValueError(f"{path}: {column} must be a finite number in each evaluation row")
        log.loc[held.index, column] = values
    return log


def evaluations(log: pd.DataFrame) -> pd.DataFrame:
    """The log's evaluation rows (those with held-out scores), backends in log order."""
    if HEADLINE not in log:
        raise ValueError("the training log has no held-out [MASK] scores")
    return log.dropna(subset=[HEADLINE])


def parity_plot(log: pd.DataFrame, path: Path, title: str) -> None:
    """Two panels, held-out [MASK] loss against steps and against training seconds, with
    the unigram baseline's loss dashed."""
    held = evaluations(log)
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.2), sharey=True)
    try:
        for backend, rows in held.groupby("backend", sort=False):
            label = backend_label(str(backend))
            for ax, x in zip(axes, ("step", "seconds"), strict=True):
                ax.plot(rows[x], rows[HEADLINE], "o-", markersize=3, label=label)
        unigram = held["heldout_unigram_mask_loss"].iloc[-1]
        xlabels = ("step", "training seconds (as logged: see each row's threads and load1)")
        for ax, x in zip(axes, xlabels, strict=True):
            ax.axhline(unigram, color="0.5", linestyle="--", linewidth=1, label="unigram")
            ax.set_xlabel(x)
            ax.grid(alpha=0.3)
        axes[0].set_ylabel("held-out [MASK] cross-entropy (nats)")
        handles, labels = axes[0].get_legend_handles_labels()
        fig.legend(handles, labels, loc="center right", fontsize=8)
        fig.subplots_adjust(right=0.80)
        fig.suptitle(title, fontsize=8)
        atomic_save(fig, path)
    finally:
        plt.close(fig)


def parity_table(log: pd.DataFrame) -> tuple[list[str], list[list[str]], list[bool]]:
    """Per backend: steps, training seconds and seconds a step, the last held-out [MASK]
    loss and accuracy, the best [MASK] loss, the last accuracy per kind of masked position,
    and the step and training seconds at which it first reached the target loss
    (`target_loss`, at an evaluation step): steps do not depend on the host's load, seconds
    do."""
    held = evaluations(log)
    target = target_loss(held)
    rows = []
    for backend, runs in log.groupby("backend", sort=False):
        evals = held[held["backend"] == backend]
        last = evals.iloc[-1]
        reach = evals[evals[HEADLINE] <= target] if not math.isnan(target) else evals.iloc[:0]
        rows.append(
            [
                f"`{backend}`",
                str(int(runs["step"].max())),
                f"{runs['seconds'].max():.0f}",
                f"{runs['seconds'].max() / runs['step'].max():.3f}",
                f"{last[HEADLINE]:.3f}",
                f"{evals[HEADLINE].min():.3f}",
                f"{last['heldout_mask_accuracy']:.3f}",
                f"{last['heldout_random_accuracy']:.3f}",
                f"{last['heldout_kept_accuracy']:.3f}",
                str(int(reach["step"].iloc[0])) if len(reach) else "–",
                f"{reach['seconds'].iloc[0]:.0f}" if len(reach) else "–",
                f"{runs['load1'].mean():.2f}" if "load1" in runs else "–",
            ]
        )
    header = ["backend", "steps", "train s", "s/step", "[MASK] loss", "best", "[MASK] acc",
              "random acc", "kept acc", f"steps to {target:.3f}", "s to it", "load"]  # fmt: skip
    numeric = [False] + [True] * (len(header) - 1)
    return header, rows, numeric


def target_loss(held: pd.DataFrame) -> float:
    """The YOSO models' target: the worst of the YOSO backends' best held-out [MASK] losses,
    so every YOSO run reaches it; NaN when no YOSO backend trained."""
    yoso = held[held["backend"].astype(str).str.startswith("yoso:")]
    if yoso.empty:
        return math.nan
    return float(yoso.groupby("backend")[HEADLINE].min().max())


def baselines(log: pd.DataFrame) -> dict[str, float]:
    """The baselines on the held-out positions: unigram [MASK] loss and accuracy,
    copy-or-most-frequent accuracy over all masked bytes, and the share of masked bytes
    left out as seen in training."""
    last = evaluations(log).iloc[-1]
    keys = ("unigram_mask_loss", "unigram_mask_accuracy", "copy_accuracy", "seen_share")
    return {key: float(last[f"heldout_{key}"]) for key in keys}


def training_section(path: Path) -> list[str]:
    """A training log's section: the baselines, then where each backend got to."""
    from attnbench.views.cells import markdown_table

    log = read_log(path)
    base = baselines(log)
    threads = (
        ", ".join(str(int(t)) for t in sorted(set(log["threads"]))) if "threads" in log else "?"
    )
    return [
        f"## {path.stem}",
        "",
        f"`plots/{path.name}`, written by `attnbench train`; {threads} threads; held-out "
        f"[MASK] loss of the unigram model {base['unigram_mask_loss']:.3f} nats, its accuracy "
        f"{base['unigram_mask_accuracy']:.3f}; copy-or-most-frequent over all masked bytes "
        f"{base['copy_accuracy']:.3f}; {base['seen_share']:.1%} of the held-out masked bytes "
        "were left out as seen verbatim in training. `train s`: training alone, evaluations "
        "excluded; `load`: the host's mean one-minute load during the run; `steps to`, `s to "
        "it`: the step and training seconds at which the held-out [MASK] loss first reached "
        "the worst of the YOSO runs' best losses (at an evaluation step).",
        "",
        *markdown_table(*parity_table(log)),
        "",
    ]
