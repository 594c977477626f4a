"""The loss curve of a training run (`attnbench train`): training loss per step, smoothed,
and the held-out loss at each evaluation, against the step."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from attnbench.views.figures import atomic_save, plt

SMOOTHING = 50  # steps in the training loss's moving mean: one step's batch is noisy


def loss_plot(log: pd.DataFrame, path: Path, title: str) -> None:
    fig, ax = plt.subplots(figsize=(7, 4))
    try:
        smooth = log["loss"].rolling(SMOOTHING, min_periods=1).mean()
        ax.plot(log["step"], log["loss"], color="0.8", linewidth=0.5, label="training, per step")
        ax.plot(log["step"], smooth, label=f"training, mean of {SMOOTHING} steps")
        held = log.dropna(subset=["heldout_loss"])
        ax.plot(held["step"], held["heldout_loss"], "o-", label="held-out (expectation)")
        ax.set_xlabel("step")
        ax.set_ylabel("masked-byte cross-entropy (nats)")
        ax.set_title(title, fontsize=9)
        ax.grid(alpha=0.3)
        ax.legend()
        atomic_save(fig, path)
    finally:
        plt.close(fig)
