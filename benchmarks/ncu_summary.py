"""One row per kernel launch from Nsight Compute's `--csv` log (as `gpu_run.sh ncu` writes
it): duration, throughputs against the GPU's peaks, occupancy, registers and launch shape.

    python benchmarks/ncu_summary.py NCU_LOG.csv OUT.csv
"""

from __future__ import annotations

import io
import re
from pathlib import Path

import pandas as pd
import typer

METRICS = {
    "Duration": "duration_us",
    "Memory Throughput": "memory_pct",
    "DRAM Throughput": "dram_pct",
    "L2 Cache Throughput": "l2_pct",
    "Compute (SM) Throughput": "sm_pct",
    "Achieved Occupancy": "occupancy_pct",
    "Theoretical Occupancy": "theoretical_occupancy_pct",
    "Registers Per Thread": "registers",
    "Grid Size": "grid",
    "Block Size": "block",
}
# Duration's unit as ncu prints it, in microseconds.
TO_US = {"ns": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3, "nsecond": 1e-3}


def kernel_name(raw: str) -> str:
    """`numba:NAME` for attnbench's kernels (numba's mangled suffix dropped), `torch:...`
    for the rest, cut to 60 characters."""
    if raw.startswith("attnbench::"):
        return "numba:" + re.sub(r"\[abi:.*", "", raw.removeprefix("attnbench::"))
    return "torch:" + re.sub(r"^void |^at::native::", "", raw).replace("at::native::", "at::")[:60]


def summary(log: str) -> pd.DataFrame:
    rows = "".join(line for line in log.splitlines(keepends=True) if line.startswith('"'))
    raw = pd.read_csv(io.StringIO(rows), dtype=str)
    raw = raw[raw["Metric Name"].isin(METRICS)]
    wide = raw.pivot_table(
        index=["ID", "Kernel Name"], columns="Metric Name", values="Metric Value", aggfunc="first"
    ).reset_index()
    units = raw[raw["Metric Name"] == "Duration"].set_index("ID")["Metric Unit"]
    out = pd.DataFrame({"launch": wide["ID"], "kernel": wide["Kernel Name"].map(kernel_name)})
    for metric, column in METRICS.items():
        out[column] = pd.to_numeric(wide[metric].str.replace(",", ""), errors="coerce")
    out["duration_us"] *= wide["ID"].map(units).map(TO_US).to_numpy()
    out["launch"] = out["launch"].astype(int)
    return out.sort_values("launch")


def main(log: Path, out: Path) -> None:
    summary(log.read_text()).to_csv(out, index=False, float_format="%.4g")


if __name__ == "__main__":
    typer.run(main)
