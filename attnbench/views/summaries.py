"""Report tables beside the per-file ones: Fig. 8's slope across result files, and a
benchmark script's CSV as it is. Cells are formatted as the report's own tables are."""

from __future__ import annotations

import pandas as pd

from attnbench.views.cells import number as _num

SLOPE = "radian_slope_log2n_vs_yoso_e"
SLOPE_NOTE = (
    "Radians per doubling of n of YOSO-m's error against YOSO-E (least squares over every "
    "trial at n = 64..4096, ± its standard error), one column per result file above."
)


def slope_table(slopes: dict[str, pd.DataFrame]) -> tuple[list[str], list[list[str]], list[bool]]:
    """Rows m, a column per file: the slope ± its standard error."""
    by_m = {
        stem: {int(row["m"]): f"{_num(row['value'])} ± {_num(row['std'])}"
               for _, row in frame.iterrows()}
        for stem, frame in slopes.items()
    }  # fmt: skip
    ms = sorted({m for column in by_m.values() for m in column})
    header = ["m", *(f"`{stem}`" for stem in slopes)]
    rows = [[str(m), *(by_m[stem].get(m, "–") for stem in slopes)] for m in ms]
    return header, rows, [True] * len(header)


def plain_table(frame: pd.DataFrame) -> tuple[list[str], list[list[str]], list[bool]]:
    """A benchmark script's CSV as it is: numbers to three significant digits."""
    numeric = [pd.api.types.is_numeric_dtype(frame[c]) for c in frame.columns]
    rows = [
        [_num(v) if is_number else str(v) for v, is_number in zip(row, numeric, strict=True)]
        for row in frame.itertuples(index=False)
    ]
    return list(frame.columns), rows, numeric
