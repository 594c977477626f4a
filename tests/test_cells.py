"""A value reads the same in the terminal's tables (rich) and in the docs' Markdown tables:
both take each cell's text from `views.cells`, kind by kind."""

from __future__ import annotations

from rich.text import Text

from attnbench.results.schema import Row, rows_frame
from attnbench.views import cells, report, tables

BASE = dict(impl="torch", device="cpu", dtype="float32", mode="fwd", inputs="random", batch=1,
            heads=1, dim=8)  # fmt: skip


def row(study: str, backend: str, seq: int, metric: str, value, **fields) -> Row:
    fields = {**BASE, **fields}
    return Row(study=study, backend=backend, seq=seq, metric=metric, value=value, **fields)


def terminal(table) -> dict[str, list[str]]:
    """A rich table's cells as the terminal shows their text (markup rendered), by header."""
    return {
        " ".join(str(column.header).split()): [Text.from_markup(str(c)).plain for c in column.cells]
        for column in table.columns
    }


def markdown(table: tuple) -> dict[str, list[str]]:
    """A Markdown table's cells (`report`'s header, rows, alignment), by header."""
    header, rows, _ = table
    return {name: [r[i] for r in rows] for i, name in enumerate(header)}


def same(term: dict, md: dict, pairs: dict[str, str]) -> None:
    for term_header, md_header in pairs.items():
        assert term[term_header] == md[md_header], (term_header, term[term_header])


def time_rows() -> list[Row]:
    """A baseline, a faster backend (its speed-up recorded against sdpa), a slow one timed
    in seconds, and a case that ran out of memory; each with its peak memory."""
    rows = []
    for backend, value, speedup, peak in (
        ("sdpa", 4.0, 1.0, 2.0),
        ("yoso-32", 1.0, 4.0, 2.5),
        ("softmax", 1500.0, 4 / 1500, 1234.5),
    ):
        spread = dict(p10=value * 0.9, p90=value * 1.1, samples=[value], stable=True)
        rows.append(row("time", backend, 64, "time_ms", value, speedup=speedup, baseline="sdpa",
                        **spread))  # fmt: skip
        rows.append(row("time", backend, 64, "peak_mib", peak))
    oom = dict(status="oom", reason="out of memory at batch 1")
    rows.append(row("time", "performer", 64, "time_ms", None, **oom))
    rows.append(row("time", "performer", 64, "peak_mib", None, **oom))
    return rows


def test_time_table_cells_read_the_same():
    """Times (ms, and s from 1000 ms), p10–p90 intervals, speed-ups, memory, status."""
    frame = rows_frame(time_rows())
    term = terminal(tables.time_table(frame, "sdpa", 0.5))
    md = markdown(report.time_table(frame))
    pairs = {"n": "n", "median": "median", "p10 – p90": "p10 – p90", "speed-up vs sdpa": "vs sdpa"}
    same(term, md, {**pairs, "peak MiB": "peak MiB", "status": "status"})
    assert term["median"] == ["4 ms", "1 ms", "1.5 s", cells.MISSING]
    assert term["p10 – p90"][2] == "1.35 – 1.65 s"
    assert term["speed-up vs sdpa"][:3] == ["1×", "4×", "0.00267×"]
    assert term["peak MiB"] == ["2", "2.5", "1234", cells.MISSING]
    assert term["status"][3] == "oom (out of memory at batch 1)"


def test_a_speedup_with_its_interval_starts_as_the_markdown_speedup():
    """Markdown shows the point estimate; the terminal adds the paired rounds' interval."""
    rows = time_rows()
    rows[2].speedup_low, rows[2].speedup_high = 3.5, 4.5
    frame = rows_frame(rows)
    term = terminal(tables.time_table(frame, "sdpa", 0.5))["speed-up (95% CI) vs sdpa"]
    md = markdown(report.time_table(frame))["vs sdpa"]
    assert md[1] == "4×" and term[1] == "4× (3.5 – 4.5)" == cells.speedup(4.0, 3.5, 4.5)


def test_image_sizes_read_the_same():
    frame = rows_frame([row("time", "sdpa", 64, "time_ms", 2.0, grid_h=8, grid_w=8)])
    term = terminal(tables.time_table(frame, "sdpa", 0.5))
    md = markdown(report.time_table(frame))
    assert term["image"] == md["image"] == ["8×8"]


def test_a_status_reads_the_same_and_markdown_keeps_its_first_sentence():
    reason = "[enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: out of memory"
    rows = [row("time", "softmax", 64, "time_ms", None, status="oom", reason=reason)]
    frame = rows_frame(rows)
    (term,) = terminal(tables.time_table(frame, "sdpa", 0.5))["status"]
    (md,) = markdown(report.time_table(frame))["status"]
    assert term == f"oom ({reason})"  # whole, and no markup eaten
    assert md == "oom ([enforce fail at alloc_cpu.cpp:127] err == 0)"


def test_profile_cells_read_the_same():
    """Times, shares (percentages), rates, % of the roofline bound and its over-bound mark."""
    common = dict(study="profile", backend="yoso-32", seq=1024, gflops_alg=9.78, gbs_alg=16.4)
    rows = [
        row(**common, metric="time_ms", value=27.7, bound="L3", bound_pct=29.0,
            gflops_dense=621.0),
        row(**common, metric="unmarked_ms", value=26.4),
        row(**common, metric="stage_ms", value=20.1, stage="hash", share=0.726, bound="compute",
            bound_pct=72.34),
        row(**common, metric="stage_ms", value=7.6, stage="gather", share=0.274, bound="L2",
            bound_pct=130.0, over_bound="130% of L2: cost model overcounts the work"),
    ]  # fmt: skip
    frame = rows_frame(rows)
    term = terminal(tables.stage_table(frame))
    md = markdown(report.profile_table(frame))
    pairs = {"n": "n", "median": "median", "share": "share", "GFLOP/s": "GFLOP/s"}
    same(term, md, {**pairs, "GB/s": "GB/s"})
    timed = [0, 2, 3]  # the unmarked calls' line has no rates in either
    assert [term["% of bound"][i] for i in timed] == [md["% of bound"][i] for i in timed]
    assert term["GFLOP/s dense-eq."][0] == md["dense-eq. GFLOP/s"][0] == "621"
    assert [md["% of bound"][i] for i in timed] == ["29 % L3", "72.3 % compute", "130 % L2 !"]
    assert md["share"] == ["", "", "73%", "27%"]


def test_error_cells_read_the_same():
    """An error over trials is mean ± std in both; a case that failed shows its status."""
    metric = "radian_vs_softmax"
    rows = [
        row("error", "performer", 64, metric, 0.4, std=0.01),
        row("error", "performer", 128, metric, 0.41234, std=0.0234),
        row("error", "performer", 256, metric, None, status="oom", reason="out of memory"),
    ]
    frame = rows_frame(rows)
    term = terminal(tables.error_table(frame))
    md = markdown(report.error_table(frame))
    assert term["mean ± std"][:2] == md[metric][:2] == ["0.4 ± 0.01", "0.412 ± 0.0234"]
    assert term["mean ± std"][2] == md["status"][2] == "oom (out of memory)"
    assert term["n"] == md["n"] == ["64", "128", "256"]


def test_model_cells_read_the_same():
    """A whole model's batch (a count), times per instance and per step, memory, status."""
    base = dict(study="model", mode="train")
    rows = [
        row(**{**base, "backend": "yoso-32", "seq": 512}, metric=metric, value=value)
        for metric, value in (("time_per_instance_ms", 125.0), ("peak_mib_per_instance", 40.5),
                              ("step_ms", 1000.0), ("batch", 8), ("peak_mib", 324.0))
    ] + [
        row(**{**base, "backend": "softmax", "seq": 512}, metric="time_per_instance_ms",
            value=None, status="oom", reason="out of memory at batch 1"),
    ]  # fmt: skip
    frame = rows_frame(rows)
    term = terminal(tables.model_table(frame))
    md = markdown(report.model_table(frame))
    names = ["n", "batch", "time / instance", "peak MiB / instance", "step", "status"]
    same(term, md, {name: name for name in names})
    assert md["time / instance"] == ["125 ms", cells.MISSING] and md["step"][0] == "1 s"
    assert md["batch"] == ["8", cells.MISSING]
    assert md["status"][1] == "oom (out of memory at batch 1)"


def test_a_missing_value_is_one_mark_in_every_kind_of_cell():
    """`results.schema.is_missing` decides an empty cell: None, NaN and pandas' NA alike."""
    import pandas as pd

    kinds = [cells.number, cells.count, cells.ms, cells.percent, cells.mib, cells.speedup]
    for empty in (None, float("nan"), pd.NA):
        assert {kind(empty) for kind in kinds} == {cells.MISSING}
        assert cells.interval(empty, 1.0) == cells.MISSING == cells.interval(1.0, empty)
        assert cells.bound({"bound_pct": empty, "bound": "L2"}) == cells.MISSING
        assert cells.mean_std(0.5, empty) == "0.5"
