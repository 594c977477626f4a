"""What shapes YOSO's Fig. 8 curve on each of its inputs: per length n, the quantities that
set how far YOSO-m lands from YOSO-E.

    python benchmarks/fig8_why.py --csv plots/yoso-fig8-why.csv

For every input of the Fig. 8 profiles and every n = 64..4096, over the same trial seeds:
- `no_collision_m8`, `no_collision_m32`: the share of query rows whose bucket holds no key
  in any of the m hashes, so YOSO-m returns a zero row (an error of pi/2 alone). Counted on
  yoso:m=M,tau=8 itself with V all ones: a row is zero exactly when nothing collided.
- `keys_90`: the mean number of keys holding 90 % of a row's YOSO-E weight
  E = (1 - arccos(q^ k^T)/pi)^tau, and `keys_90_share` that over n: how diffuse the
  expectation is that m hashes must sample.
- `mean_cos`: the mean cosine between l2-normalised queries and keys.
- `cross_window_share`: for model:minilm above 512 tokens, where the input is independently
  encoded 512-token windows joined, the share of YOSO-E weight on keys of other windows.
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import torch
import torch.nn.functional as F
import typer
from rich.console import Console

from attnbench import get_backend
from attnbench.inputs import Inputs
from attnbench.measure.threads import set_threads
from attnbench.results.formats import atomic_write

app = typer.Typer(add_completion=False)

TAU = 8
SEQS = (64, 128, 256, 512, 1024, 2048, 4096)
# the inputs of the Fig. 8 profiles, with their heads and head dim
INPUTS = {
    "model:yoso-mlm:layer=2": (2, 64),
    "model:minilm:layer=3": (12, 32),
    "random": (4, 64),
    "clustered": (4, 64),
    "clustered:size=8": (4, 64),
}
MINILM_WINDOW = 512


def no_collision(q, k, m: int, seed: int) -> float:
    """Share of rows YOSO-m (one draw of `seed`) leaves at zero: no key shares a bucket."""
    yoso = get_backend(f"yoso:m={m},tau={TAU},seed={seed}")
    y = yoso(q, k, torch.ones_like(k))
    return (y.abs().sum(-1) == 0).float().mean().item()


def expectation_facts(q, k, window: int | None) -> tuple[float, float, float]:
    """(mean keys holding 90 % of a row's YOSO-E weight, mean cosine, share of weight on
    keys outside the row's `window`-token window, or nan without windows), head by head."""
    keys, cosines, outside = [], [], []
    n = q.shape[-2]
    for head in range(q.shape[1]):
        cos = F.normalize(q[0, head], dim=-1) @ F.normalize(k[0, head], dim=-1).T
        weights = (1 - torch.arccos(cos.clamp(-1, 1)) / math.pi) ** TAU
        cosines.append(cos.mean().item())
        share = weights.sort(dim=-1, descending=True).values.cumsum(-1)
        share = share / share[:, -1:]
        keys.append(((share < 0.9).sum(-1) + 1).float().mean().item())
        if window is not None and n > window:
            block = torch.arange(n) // window
            other = block[:, None] != block[None, :]
            outside.append(((weights * other).sum(-1) / weights.sum(-1)).mean().item())
    mean = lambda xs: sum(xs) / len(xs) if xs else math.nan  # noqa: E731
    return mean(keys), mean(cosines), mean(outside)


@app.command()
def main(
    csv: Path = typer.Option(Path("plots/yoso-fig8-why.csv")),
    trials: int = typer.Option(3, help="trial seeds 0..trials-1, as the Fig. 8 profiles"),
    seqs: str = typer.Option(",".join(map(str, SEQS))),
    inputs: str = typer.Option(",".join(INPUTS), help="a comma list of the inputs above"),
    threads: int = 2,
) -> None:
    set_threads(threads)
    console = Console()
    rows = []
    for text in inputs.split(","):
        heads, dim = INPUTS[text]
        source = Inputs(text, 1, heads, dim)
        window = MINILM_WINDOW if text.startswith("model:minilm") else None
        for n in map(int, seqs.split(",")):
            facts = []
            for seed in range(trials):
                q, k, _ = source.make(n, seed, torch.float32, "cpu")
                facts.append(
                    (
                        no_collision(q, k, 8, seed),
                        no_collision(q, k, 32, seed),
                        *expectation_facts(q, k, window),
                    )  # fmt: skip
                )
            mean = [sum(column) / trials for column in zip(*facts, strict=True)]
            row = dict(zip(("no_collision_m8", "no_collision_m32", "keys_90", "mean_cos",
                            "cross_window_share"), mean, strict=True))  # fmt: skip
            rows.append({"inputs": text, "n": n, "trials": trials, **row,
                         "keys_90_share": row["keys_90"] / n})  # fmt: skip
            console.print(rows[-1])
    columns = ["inputs", "n", "trials", "no_collision_m8", "no_collision_m32", "keys_90",
               "keys_90_share", "mean_cos", "cross_window_share"]  # fmt: skip
    atomic_write(csv, pd.DataFrame(rows)[columns].to_csv(index=False))
    console.print(f"wrote {csv}")


if __name__ == "__main__":
    app()
