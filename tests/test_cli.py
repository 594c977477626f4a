"""The command line, driven through Typer's CliRunner: what each command writes, and how it fails.

Sizes are tiny so the whole file runs in seconds on a small CPU; nothing asserts on timings.
"""

from __future__ import annotations

import importlib.metadata
import json
import math
import os
import subprocess
import sys
import typing
from pathlib import Path, PurePosixPath

import numpy as np
import pandas as pd
import pytest
import torch
import typer
from helpers import (
    assert_figure_file,
    assert_ok,
    assert_one_line_error,
    invoke,
    legend_texts,
    runner,
    saved_figures,
    series,
)
from rich.console import Console

import attnbench.cli.core as cli
import attnbench.results.formats as results_formats
import attnbench.run.worker as case_worker
import attnbench.studies.time as time_study
from attnbench.backends import backend_classes, get_backend, parse_backends
from attnbench.backends.softmax import Softmax
from attnbench.cli import options
from attnbench.cli import run as profiles
from attnbench.measure.metrics import mean_radian
from attnbench.results.schema import COLUMNS
from attnbench.studies.exact import exact_softmax

TINY = ["--repeats", "2", "--min-time", "0", "--warmup", "1", "--heads", "1", "--dim", "8"]
ALL_BACKENDS = ("softmax", "sdpa", "yoso", "yoso-e")
TIME_METRICS = {"time_ms", "first_call_ms", "peak_mib"}
VS_SOFTMAX = {"radian_vs_softmax", "rel_frobenius_vs_softmax", "max_abs_vs_softmax"}
VS_SOFTMAX |= {"captured_mass_vs_softmax", "captured_mass_p5_vs_softmax", "tv_vs_softmax"}


def base_name(spec: str) -> str:
    return spec.partition(":")[0]


def files_under(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def save_qkv(path: Path, shape=(16, 8), **overrides) -> Path:
    gen = np.random.default_rng(0)
    arrays = {key: gen.standard_normal(shape).astype(np.float32) for key in "qkv"}
    arrays.update(overrides)
    arrays = {key: value for key, value in arrays.items() if value is not None}
    if path.suffix == ".pt":
        torch.save({key: torch.as_tensor(value) for key, value in arrays.items()}, path)
    else:
        np.savez(path, **arrays)
    return path


# ------------------------------------------------------------------------------ happy paths


@pytest.fixture(scope="module")
def time_run(tmp_path_factory):
    """One tiny `time` sweep over every backend, writing CSV, JSON and a PNG."""
    out = tmp_path_factory.mktemp("time_run")
    paths = {"csv": out / "r.csv", "json": out / "r.json", "plot": out / "x.png"}
    result = invoke(
        "time",
        "--seq",
        "32,64",
        *TINY,
        "--backends",
        ",".join(ALL_BACKENDS),
        "--seed",
        "7",
        *(arg for key, path in paths.items() for arg in (f"--{key}", path)),
    )
    return result, out, paths


def _backend_entries(output: str) -> dict[str, list[str]]:
    """The backends table as {name: its detail lines}, from its box-drawn rows."""
    entries, name = {}, None
    for line in output.splitlines():
        parts = [part.strip() for part in line.split("│")]
        if len(parts) != 4:
            continue
        name = parts[1] or name
        entries.setdefault(name, []).append(parts[2])
    return entries


@pytest.mark.parametrize("width", [80, 400])
def test_backends_lists_every_backend_with_its_parameters(monkeypatch, width):
    monkeypatch.setattr(cli, "console", Console(width=width))
    result = invoke("backends")
    assert_ok(result)
    assert max(len(line) for line in result.stdout.splitlines()) <= width
    assert "…" not in result.stdout
    entries = {n: " ".join(lines) for n, lines in _backend_entries(result.stdout).items()}
    classes = backend_classes()
    assert set(entries) == set(classes)
    for name, cls in classes.items():
        text = " ".join(entries[name].split())
        for piece in (cls.summary, cls.complexity):
            assert " ".join(piece.split()) in text, (name, piece)
        for key, param in cls.params.items():
            assert f"{key}={param.default}" in text
        assert ("backward: yes" if cls.backward else "no backward") in text
    assert "yoso-N sets m" in entries["yoso"]
    assert entries["softmax"].count("none") == 1 and "backward: yes" in entries["yoso-e"]


def test_time_writes_csv_json_plot_and_env_sidecar(time_run):
    result, out, paths = time_run
    assert_ok(result)
    assert files_under(out) == ["r.csv", "r.env.json", "r.json", "x.png"]  # no temp files left

    df = pd.read_csv(paths["csv"])
    # the fixed columns, then each backend parameter as a column of its own
    assert list(df.columns[: len(COLUMNS)]) == COLUMNS
    assert {"m", "tau", "hash"} <= set(df.columns[len(COLUMNS) :])
    assert (df.loc[df["backend"].map(base_name) == "yoso", "m"] == 32).all()
    assert (df["study"] == "time").all() and (df["status"] == "ok").all()
    assert (df["device"] == "cpu").all() and (df["mode"] == "fwd").all()
    assert (df["heads"] == 1).all() and (df["dim"] == 8).all() and (df["batch"] == 1).all()
    got = sorted(zip(df["backend"].map(base_name), df["seq"], df["metric"], strict=True))
    want = sorted((b, n, m) for b in ALL_BACKENDS for n in (32, 64) for m in TIME_METRICS)
    assert got == want
    times = df[df["metric"] == "time_ms"]
    # --repeats 2 shared out over the default 5 rounds: ceil(2 / 5) = 1 sample a round
    assert (times["count"] == 5).all()
    assert times["samples"].map(sample_count).eq(5).all()
    assert times["round_sizes"].eq("[1, 1, 1, 1, 1]").all()
    # every backend ran in the baseline's rounds: a paired speed-up with its interval
    assert times["baseline"].eq("sdpa").all()
    assert (times["speedup_low"] <= times["speedup"]).all()
    assert (times["speedup"] <= times["speedup_high"]).all()
    assert (times["value"] > 0).all() and (times["p10"] <= times["p90"]).all()
    assert (df.loc[df["metric"] == "first_call_ms", "value"] > 0).all()
    assert (df.loc[df["metric"] == "peak_mib", "value"] >= 0).all()

    sidecar = json.loads((out / "r.env.json").read_text())
    assert isinstance(sidecar["command"], str) and sidecar["command"]
    assert sidecar["seed"] == 7
    assert sidecar["threads"] == torch.get_num_threads()
    assert sidecar["torch"] == torch.__version__

    doc = json.loads(paths["json"].read_text())
    assert doc["env"] == sidecar
    assert len(doc["rows"]) == len(df)
    assert [r["metric"] for r in doc["rows"]] == list(df["metric"])

    assert paths["plot"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_time_fwdbwd_runs_every_backend_with_yoso_kernels(tmp_path):
    csv = tmp_path / "r.csv"
    result = invoke(
        "time", "--seq", "32,64", *TINY, "--mode", "fwdbwd",
        "--backends", ",".join(ALL_BACKENDS), "--csv", csv,
    )  # fmt: skip
    assert_ok(result)
    df = pd.read_csv(csv, keep_default_na=False, na_values=[""])
    assert (df["mode"] == "fwdbwd").all() and (df["status"] == "ok").all()
    got = sorted(zip(df["backend"].map(base_name), df["seq"], df["metric"], strict=True))
    assert got == sorted((b, n, m) for b in ALL_BACKENDS for n in (32, 64) for m in TIME_METRICS)
    impl = dict(zip(df["backend"].map(base_name), df["impl"], strict=False))
    assert impl["yoso"] == "numba-cpu" and impl["sdpa"] == "torch"


def test_time_fwdbwd_skips_backends_without_backward_and_goes_on(tmp_path, monkeypatch):
    monkeypatch.setattr(backend_classes()["yoso"], "backward", False)
    csv = tmp_path / "r.csv"
    result = invoke(
        "time", "--seq", "32,64", *TINY, "--mode", "fwdbwd",
        "--backends", ",".join(ALL_BACKENDS), "--csv", csv,
    )  # fmt: skip
    assert_ok(result)
    df = pd.read_csv(csv, keep_default_na=False, na_values=[""])
    yoso = df[df["backend"].map(base_name) == "yoso"]
    assert sorted(yoso["seq"]) == [32, 64]
    assert (yoso["status"] == "skipped").all() and (yoso["metric"] == "time_ms").all()
    assert yoso["reason"].str.contains("backward").all()
    assert yoso["value"].isna().all()
    rest = df[df["backend"].map(base_name) != "yoso"]
    assert (rest["status"] == "ok").all()
    got = sorted(zip(rest["backend"].map(base_name), rest["seq"], rest["metric"], strict=True))
    want = sorted(
        (b, n, m) for b in ("softmax", "sdpa", "yoso-e") for n in (32, 64) for m in TIME_METRICS
    )
    assert got == want


def test_error_study_rows_for_every_m_and_n(tmp_path):
    """Only hashes swept: YOSO Fig. 8, every yoso-m against yoso-e."""
    csv, svg = tmp_path / "e.csv", tmp_path / "e.svg"
    result = invoke(
        "error", "--hashes", "8..16", "--seq", "16..32", "--trials", "2", "--heads", "1",
        "--dim", "8", "--csv", csv, "--plot", svg,
    )  # fmt: skip
    assert_ok(result)
    df = pd.read_csv(csv)
    assert (df["study"] == "error").all() and (df["status"] == "ok").all()
    assert (df["count"] == 2).all()
    assert set(df["metric"].str.partition("_vs_")[2]) == {"yoso_e"}

    yoso = df[df["metric"] == "radian_vs_yoso_e"]
    pairs = sorted(
        zip(yoso["backend"].str.extract(r"m=(\d+)")[0].astype(int), yoso["seq"], strict=True)
    )
    assert pairs == [(8, 16), (8, 32), (16, 16), (16, 32)]
    assert yoso["value"].between(0, math.pi).all()
    assert yoso["samples"].map(sample_count).eq(2).all()

    text = svg.read_text()
    assert "<svg" in text and text.rstrip().endswith("</svg>")


def test_error_study_compares_backends_with_exact_softmax(tmp_path):
    csv = tmp_path / "e.csv"
    result = invoke(
        "error", "--seq", "16..32", "--trials", "2", "--heads", "1", "--dim", "8",
        "--backends", "sdpa,yoso-e", "--csv", csv,
    )  # fmt: skip
    assert_ok(result)
    df = pd.read_csv(csv)
    assert (df["status"] == "ok").all() and (df["count"] == 2).all()
    assert not df["backend"].str.startswith("yoso:").any()  # no hashes swept by default
    sdpa = df[df["backend"] == "sdpa"]
    assert sorted(zip(sdpa["seq"], sdpa["metric"], strict=True)) == sorted(
        (n, m) for n in (16, 32) for m in VS_SOFTMAX
    )
    assert (sdpa.loc[sdpa["metric"] == "radian_vs_softmax", "value"] < 1e-5).all()
    yoso_e = df[df["backend"].map(base_name) == "yoso-e"]
    assert set(yoso_e["metric"]) == VS_SOFTMAX and sorted(set(yoso_e["seq"])) == [16, 32]


# the field's efficient attentions at sizes where each differs from softmax; linformer has
# no dense map (its keys are mixtures of tokens), so no captured mass or TV
FIELD_BACKENDS = {
    "nystromformer:landmarks=8,conv=3": True,
    "linformer:k=8": False,
    "performer:features=16": True,
    "reformer:bucket=8": True,
    "longformer:window=8,global=1": True,
    "yoso-c:m=8,conv=3": True,
}


def test_error_study_runs_every_field_backend_against_exact_softmax(tmp_path):
    csv = tmp_path / "e.csv"
    result = invoke(
        "error", "--seq", "32", "--trials", "2", "--mc-seeds", "2", "--heads", "2", "--dim",
        "8", "--backends", ",".join(FIELD_BACKENDS), "--csv", csv,
    )  # fmt: skip
    assert_ok(result)
    df = pd.read_csv(csv)
    assert (df["status"] == "ok").all()
    for spec, has_map in FIELD_BACKENDS.items():
        label = get_backend(spec).spec
        mine = df[df["backend"] == label].set_index("metric")["value"]
        map_metrics = {m for m in VS_SOFTMAX if m.startswith(("captured_mass", "tv"))}
        expected = VS_SOFTMAX if has_map else VS_SOFTMAX - map_metrics
        assert expected <= set(mine.index), (spec, sorted(mine.index))
        assert has_map or not map_metrics & set(mine.index), spec
        assert 1e-4 < mine["radian_vs_softmax"] < math.pi, spec  # an approximation, not a copy
        assert 0 <= mine["rel_frobenius_vs_softmax"] and math.isfinite(mine["max_abs_vs_softmax"])
        if has_map:
            assert 0 < mine["captured_mass_vs_softmax"] <= 1 + 1e-9
            assert 0 <= mine["tv_vs_softmax"] <= 1 + 1e-9


def sample_count(text) -> int:
    """Samples in a CSV cell: a JSON list (schema 2) or space-separated (schema 1)."""
    text = str(text).strip()
    return len(json.loads(text)) if text.startswith("[") else len(text.split())


@pytest.mark.parametrize(
    ("source", "out"),
    [("r.csv", "fig.svg"), ("r.json", "fig.pdf"), ("r.csv", None)],
)
def test_plot_redraws_from_a_saved_result_file(time_run, tmp_path, monkeypatch, source, out):
    """The figure goes next to the file by default, and draws each backend's medians."""
    _, run_dir, _ = time_run
    saved = tmp_path / source
    saved.write_bytes((run_dir / source).read_bytes())
    figures = saved_figures(monkeypatch)
    args = ["plot", saved] + (["--plot", tmp_path / out] if out else [])
    result = invoke(*args)
    assert_ok(result)
    figure = tmp_path / (out or "r.png")
    assert_figure_file(figure)
    ((path, fig),) = figures
    assert path == figure
    runtime = fig.axes[0]
    assert runtime.get_title() == "runtime"
    rows = pd.read_csv(run_dir / "r.csv")
    times = rows[(rows["metric"] == "time_ms") & (rows["status"] == "ok")].sort_values("seq")
    expected = sorted(
        [(float(n), round(t, 6)) for n, t in zip(group["seq"], group["value"], strict=True)]
        for _, group in times.groupby("backend")
    )
    drawn = sorted(
        [(n, round(t, 6)) for n, t in zip(*xy, strict=True)] for xy in series(runtime).values()
    )
    assert len(expected) == len(ALL_BACKENDS) and drawn == expected
    assert legend_texts(fig)[: len(ALL_BACKENDS)] == list(series(runtime))


@pytest.mark.parametrize("source", ["r.csv", "r.json"])
def test_plot_hands_the_run_environment_to_the_figure(time_run, tmp_path, monkeypatch, source):
    """The subtitle's device and threads come from the run's record for files whose rows
    lack them: a CSV's .env.json sidecar, a JSON's "env"."""
    import attnbench.views.plots as plots

    _, run_dir, _ = time_run
    for name in ("r.csv", "r.env.json", "r.json"):
        (tmp_path / name).write_bytes((run_dir / name).read_bytes())
    seen = []
    monkeypatch.setattr(plots, "plot_results", lambda frame, out, env=None: seen.append(env))
    assert_ok(invoke("plot", tmp_path / source, "--plot", tmp_path / "f.png"))
    expected = json.loads((run_dir / "r.env.json").read_text())
    assert seen == [expected] and expected["threads"] >= 1


@pytest.mark.parametrize(
    ("name", "shape", "batch", "heads"),
    [
        ("qkv.npz", (16, 4), 1, 1),
        ("qkv.npz", (3, 16, 4), 1, 3),
        ("qkv.npz", (2, 3, 16, 4), 2, 3),
        ("qkv.pt", (2, 16, 4), 1, 2),
    ],
)
def test_error_study_reads_inputs_from_a_file(tmp_path, name, shape, batch, heads):
    df = _rows_on_file_inputs(
        tmp_path, name, shape, "error", "--trials", "2", "--backends", "yoso-e"
    )
    assert (df["batch"] == batch).all() and (df["heads"] == heads).all()

    # The file's own numbers were used: recompute yoso-e's error against softmax from it.
    full = [torch.as_tensor(t).reshape(batch, heads, 16, 4) for t in _load(tmp_path / name)]
    for n in (8, 16):
        q, k, v = (t[:, :, :n] for t in full)
        expected = mean_radian(get_backend("yoso-e")(q, k, v), exact_softmax(q, k, v))
        row = df[(df["seq"] == n) & (df["metric"] == "radian_vs_softmax")]
        assert row["value"].tolist() == pytest.approx([expected], abs=1e-6)


def test_time_reads_inputs_from_a_file(tmp_path):
    df = _rows_on_file_inputs(
        tmp_path, "qkv.npz", (2, 3, 16, 4), "time", "--backends", "sdpa", "--repeats", "2",
        "--warmup", "0",
    )  # fmt: skip
    assert (df["batch"] == 2).all() and (df["heads"] == 3).all()


def _rows_on_file_inputs(tmp_path, name, shape, *args) -> pd.DataFrame:
    """A study's rows on q, k, v (d = 4, 16 tokens) saved in tmp_path / name, at n = 8, 16."""
    csv = tmp_path / "r.csv"
    result = invoke(
        *args, "--inputs", save_qkv(tmp_path / name, shape), "--seq", "8,16", "--csv", csv
    )
    assert_ok(result)
    df = pd.read_csv(csv)
    assert (df["inputs"] == name).all() and sorted(set(df["seq"])) == [8, 16]
    assert (df["dim"] == 4).all()
    return df


def _load(path: Path):
    if path.suffix == ".pt":
        data = torch.load(path)
        return [data[key] for key in "qkv"]
    with np.load(path) as data:
        return [data[key] for key in "qkv"]


# ------------------------------------------------------------------------------ bad input

TIME = [
    "time", "--seq", "32", "--repeats", "1", "--warmup", "0", "--heads", "1", "--dim", "8",
    "--backends", "sdpa", "--csv", "r.csv", "--json", "r.json", "--plot", "r.png",
]  # fmt: skip
ERROR = [
    "error", "--hashes", "8", "--seq", "16", "--trials", "1", "--heads", "1", "--dim", "8",
    "--inputs", "random", "--csv", "r.csv", "--json", "r.json", "--plot", "r.png",
]  # fmt: skip
TOML_TIME = [
    "repeats = 1", "warmup = 0", "heads = 1", "dim = 8", 'backends = "sdpa"',
    'csv = "r.csv"', 'json = "r.json"', 'plot = "r.png"',
]  # fmt: skip
NO_CUDA = pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA GPU is available here")


def _case(id_, args, needle="", marks=()):
    return pytest.param(args, needle, id=id_, marks=marks)


BAD_INPUTS = [
    _case("hashes-reversed-range", [*ERROR, "--hashes", "128..8"], "--hashes"),
    _case("seq-not-a-number", [*TIME, "--seq", "abc"], "--seq"),
    _case("seq-empty", [*TIME, "--seq", ""], "--seq"),
    _case("seq-zero", [*TIME, "--seq", "0"], "--seq"),
    _case("error-seq-not-a-number", [*ERROR, "--seq", "abc"], "--seq"),
    _case("batch-zero", [*TIME, "--batch", "0"], "--batch"),
    _case("heads-negative", [*TIME, "--heads", "-1"], "--heads"),
    _case("dim-zero", [*TIME, "--dim", "0"], "--dim"),
    _case("error-dim-zero", [*ERROR, "--dim", "0"], "--dim"),
    _case("trials-zero", [*ERROR, "--trials", "0"], "--trials"),
    _case("repeats-zero", [*TIME, "--repeats", "0"], "--repeats"),
    _case("tau-zero", [*ERROR, "--tau", "0"], "--tau"),
    _case("tau-too-big", [*ERROR, "--tau", "25"], "--tau"),
    _case("backend-tau-too-big", [*TIME, "--backends", "yoso:tau=30"], "tau"),
    _case("backend-unknown", [*TIME, "--backends", "nosuch"], "softmax"),
    _case("backend-unknown-param", [*TIME, "--backends", "yoso:bogus=1"], "tau"),
    _case("device-cuda-without-gpu", [*TIME, "--device", "cuda"], "cuda", NO_CUDA),
    _case("dtype-unknown", [*TIME, "--dtype", "float8"], "float8"),
    _case("mode-unknown", [*TIME, "--mode", "sideways"], "sideways"),
    _case("csv-missing-directory", [*TIME, "--csv", "missing/r.csv"], "missing"),
    _case("csv-parent-is-a-file", [*TIME, "--csv", "afile/r.csv"], "afile"),
    _case("csv-unwritable-directory", [*TIME, "--csv", "locked/r.csv"], "writable"),
    _case("error-json-missing-directory", [*ERROR, "--json", "missing/r.json"], "missing"),
    _case("plot-bad-suffix", [*TIME, "--plot", "out.txt"], "--plot"),
    _case("inputs-without-v", [*ERROR, "--inputs", "no_v.npz"], "q, k and v"),
    _case("inputs-mismatched-shapes", [*ERROR, "--inputs", "mismatch.npz"], "mismatched"),
    _case("inputs-nan", [*ERROR, "--inputs", "nan.npz"], "NaN"),
    _case("inputs-inf", [*ERROR, "--inputs", "inf.npz"], "inf"),
    _case("inputs-missing-file", [*ERROR, "--inputs", "nope.npz"], "nope.npz"),
    _case("inputs-shorter-than-seq", [*ERROR, "--inputs", "short.npz", "--seq", "32"], "--seq"),
    _case("time-inputs-shorter-than-seq", [*TIME, "--inputs", "short.npz"], "--seq"),
    _case(
        "time-inputs-shorter-than-grid",
        [*TIME[:1], "--grid", "4x8", *TIME[3:], "--inputs", "short.npz"],
        "--grid",
    ),
    _case("time-image-without-grid", [*TIME, "--inputs", "blobs"], "--grid HxW"),
    _case(
        "time-unknown-image",
        [*TIME[:1], "--grid", "8x8", *TIME[3:], "--inputs", "image:nope"],
        "unknown image",
    ),
    _case("time-inputs-missing-file", [*TIME, "--inputs", "nope.npz"], "nope.npz"),
    _case("plot-missing-file", ["plot", "nope.csv", "--plot", "fig.png"], "nope.csv"),
    _case("plot-not-a-result-file", ["plot", "notes.csv", "--plot", "fig.png"], "notes.csv"),
    _case("batch-not-an-integer", [*TIME, "--batch", "x"], "--batch"),
    _case("baseline-unknown", [*TIME, "--baseline", "nosuch"], "nosuch"),
    _case(
        "json-is-the-csv-sidecar",
        [*TIME[:-6], "--csv", "r.csv", "--json", "r.env.json"],
        "environment record",
    ),
    _case("hashes-above-limit", [*ERROR[:2], "8192", *ERROR[3:]], "bad m"),
    _case("run-missing-profile", ["run", "nope.toml"], "nope.toml"),
    _case("run-invalid-toml", ["run", "broken.toml"], "broken.toml"),
    _case("run-unknown-command", ["run", "plot.toml"], "command"),
    _case("run-bad-option-value", ["run", "bad_seq.toml"], "--seq"),
    _case(
        "plot-json-that-is-not-an-object",
        ["plot", "list.json", "--plot", "fig.png"],
        "list.json",
    ),
    _case(
        "inputs-non-numeric-entry",
        [*ERROR, "--inputs", "text.pt"],
        "text.pt",
    ),
    _case("seq-range-three-dots", [*TIME, "--seq", "512...4096"], "did you mean 512..4096"),
    _case("seq-range-dash", [*TIME, "--seq", "1k-4k"], "did you mean 1k..4k"),
    _case("grid-range-dash", ["maps", "--grid", "8x8-16x16"], "did you mean 8x8..16x16"),
    _case("inputs-pickled-object", [*ERROR, "--inputs", "object.pt"], "object.pt"),
    _case("inputs-sparse-tensor", [*ERROR, "--inputs", "sparse.pt"], "sparse.pt"),
    _case(
        "inputs-zero-size-dimension",
        [*ERROR, "--inputs", "empty_d.npz", "--seq", "8"],
        "empty_d.npz",
    ),
    _case(
        "run-options-not-a-table",
        ["run", "flat.toml"],
        "flat.toml",
    ),
]


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    """A directory of bad inputs; `locked/` reads as unwritable to the option checks."""
    monkeypatch.chdir(tmp_path)
    save_qkv(tmp_path / "no_v.npz", v=None)
    save_qkv(tmp_path / "mismatch.npz", k=np.ones((12, 8), np.float32))
    save_qkv(tmp_path / "nan.npz", k=np.full((16, 8), np.nan, np.float32))
    inf = np.ones((16, 8), np.float32)
    inf[3, 2] = np.inf
    save_qkv(tmp_path / "inf.npz", v=inf)
    save_qkv(tmp_path / "short.npz", (16, 8))
    save_qkv(tmp_path / "empty_d.npz", (16, 0))
    torch.save({"q": "not numbers", "k": torch.ones(16, 8), "v": torch.ones(16, 8)}, "text.pt")
    ones = torch.ones(16, 8)
    torch.save({"q": PurePosixPath("q.npy"), "k": ones, "v": ones}, "object.pt")  # not a tensor
    sparse = torch.sparse_coo_tensor(torch.tensor([[0, 1], [1, 0]]), torch.ones(2), (16, 8))
    torch.save({"q": sparse, "k": sparse, "v": sparse}, "sparse.pt")
    (tmp_path / "notes.csv").write_text("name,age\nada,36\n")
    (tmp_path / "list.json").write_text("[1, 2, 3]\n")
    (tmp_path / "afile").write_text("a regular file\n")
    (tmp_path / "broken.toml").write_text('command = "time\n')
    (tmp_path / "plot.toml").write_text('command = "plot"\n')
    (tmp_path / "flat.toml").write_text('command = "time"\noptions = 3\n')
    profile = "\n".join(['command = "time"', "[options]", *TOML_TIME, 'seq = "abc"'])
    (tmp_path / "bad_seq.toml").write_text(profile + "\n")
    locked = tmp_path / "locked"
    locked.mkdir()

    real_access = os.access

    def access(path, mode, *args, **kwargs):
        if mode & os.W_OK and Path(path).resolve() == locked.resolve():
            return False
        return real_access(path, mode, *args, **kwargs)

    monkeypatch.setattr("attnbench.api.probes.os.access", access)
    return tmp_path


@pytest.mark.parametrize(("args", "needle"), BAD_INPUTS)
def test_bad_input_is_one_line_exit_2_and_writes_nothing(workdir, args, needle):
    before = files_under(workdir)
    result = invoke(*args)
    assert_one_line_error(result, needle)
    assert files_under(workdir) == before


def test_unknown_backend_message_lists_the_valid_names(workdir):
    line = assert_one_line_error(invoke(*TIME, "--backends", "softmax,nosuch"), "nosuch")
    for name in ALL_BACKENDS:
        assert name in line


def test_no_arguments_shows_help_without_an_empty_error_line():
    result = invoke()
    assert result.exit_code == 2
    assert "Usage" in result.stdout and "time" in result.stdout
    assert result.stderr.strip() == ""


@pytest.mark.parametrize(
    ("command", "flags"),
    [([], ["--version", "--help"]), (["time"], ["--resume", "--help"])],
)
def test_help_shows_no_value_type_for_a_flag(command, flags):
    """Flags read as taking a value: `--version  <bool>`."""
    result = runner.invoke(cli.app, [*command, "--help"], terminal_width=80)
    assert_ok(result)
    for flag in flags:
        (line,) = [line for line in result.output.splitlines() if f"│ {flag} " in line]
        assert "<" not in line, line


def test_run_help_lists_every_shipped_profile_in_80_columns():
    result = runner.invoke(cli.app, ["run", "--help"], terminal_width=80)
    assert_ok(result)
    shipped = sorted(p.name for p in (Path(__file__).parent.parent / "profiles").glob("*.toml"))
    assert len(shipped) > 10
    for name in shipped:
        assert f" {name}: " in result.output
    assert "yoso-fig7.toml: YOSO Fig. 7 on the CPU" in result.output
    assert max(len(line) for line in result.output.splitlines()) <= 80


def _help(option) -> str:
    """The help text of an `options` annotation."""
    return typing.get_args(option)[1].help


def test_inputs_help_names_every_kind_of_inputs():
    """`model:yoso-mlm` was missing from the help while --inputs accepted it."""
    from attnbench.inputs.registry import SOURCES

    usages = [usage for cls in SOURCES for usage in cls.usage]
    assert "model:yoso-mlm" in usages
    text = _help(options.Inputs).replace("[", "").replace("]", "")  # optional parts, spelt out
    assert [usage for usage in usages if usage not in text] == []


def test_maps_grid_help_offers_only_what_maps_accepts(tmp_path, monkeypatch):
    """The help offered lists and ranges, which maps refuses: it draws one grid."""
    text = _help(options.OneGrid)
    assert "list" not in text and ".." not in text and "one image HxW" in text
    for grid in ("32x32,64x64", "32x32..64x64"):
        assert_one_line_error(invoke("maps", "--grid", grid), "one grid")
    monkeypatch.chdir(tmp_path)
    example = text.partition("e.g. ")[2].split()[0]  # the help's own example is accepted
    assert_ok(invoke("maps", "--grid", example, "--backends", "softmax", "--inputs", "random"))


def test_run_help_names_a_profile_by_the_path_that_runs(monkeypatch):
    """The help suggested `yoso-fig8.toml`, which is no file outside profiles/."""
    root = Path(__file__).parents[1]
    monkeypatch.chdir(root)
    param = next(p for p in typer.main.get_command(cli.app).commands["run"].params)
    example = param.help.partition("e.g. ")[2]
    assert example.startswith("profiles/")
    assert profiles.profile_argv(Path(example))[0] in profiles.PROFILE_COMMANDS
    assert "attnbench run profiles/NAME" in profiles._epilog()


def test_run_executes_a_toml_profile(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    lines = ['command = "time"', "[options]", 'seq = "32,64"', "warmup = 1", "repeats = 2"]
    lines += ["heads = 1", "dim = 8", 'backends = "sdpa,yoso-e"', 'csv = "out/r.csv"']
    (tmp_path / "out").mkdir()
    (tmp_path / "tiny.toml").write_text("\n".join(lines) + "\n")
    result = invoke("run", "tiny.toml")
    assert_ok(result)
    df = pd.read_csv(tmp_path / "out" / "r.csv")
    assert (df["heads"] == 1).all() and (df["dim"] == 8).all()
    got = sorted(zip(df["backend"].map(base_name), df["seq"], df["metric"], strict=True))
    assert got == sorted(
        (b, n, m) for b in ("sdpa", "yoso-e") for n in (32, 64) for m in TIME_METRICS
    )


def test_run_draws_maps_from_a_profile(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    lines = ['command = "maps"', "[options]", 'backends = "softmax,yoso-e"', 'inputs = "random"']
    lines += ['grid = "1x16"', 'plot = "m.png"']
    (tmp_path / "m.toml").write_text("\n".join(lines) + "\n")
    assert_ok(invoke("run", "m.toml"))
    assert (tmp_path / "m.png").read_bytes().startswith(b"\x89PNG")


def test_run_refuses_a_command_profiles_cannot_drive(tmp_path):
    (tmp_path / "p.toml").write_text('command = "compare"\n')
    result = invoke("run", tmp_path / "p.toml")
    assert (
        result.exit_code == 2
        and '`command` must be one of "time", "error", "maps"' in result.stderr
    )


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ('command = "time"\nfoo = 1\n', "unknown key 'foo' (a profile has: command, options)"),
        ('command = "time"\nprofile = "other.toml"\n', "unknown key 'profile'"),
        ('command = "time"\n[options]\nseq = true\n', "seq takes a value, not true or false"),
    ],
)
def test_run_refuses_what_a_profile_cannot_mean(tmp_path, text, fragment):
    (tmp_path / "p.toml").write_text(text)
    result = invoke("run", tmp_path / "p.toml")
    assert result.exit_code == 2 and fragment in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize(("value", "flag"), [("true", ["--isolate"]), ("false", ["--no-isolate"])])
def test_profile_flags_are_true_or_false(tmp_path, value, flag):
    (tmp_path / "p.toml").write_text(f'command = "time"\n[options]\nisolate = {value}\n')
    argv = profiles.profile_argv(tmp_path / "p.toml")
    assert argv == ["time", *flag]
    params = typer.main.get_command(cli.app).commands["time"].make_context("time", argv[1:]).params
    assert params["isolate"] is (value == "true")


@pytest.mark.parametrize(
    "profile", sorted((Path(__file__).parents[1] / "profiles").glob("*.toml")), ids=lambda p: p.name
)
def test_shipped_profiles_parse_into_valid_commands(profile):
    """Every profile in profiles/ names options its command knows, with values of the right
    type, and only registered backends: a typo would otherwise surface only when someone
    spends minutes reproducing a figure."""
    argv = profiles.profile_argv(profile)
    command = typer.main.get_command(cli.app).commands[argv[0]]
    params = command.make_context(argv[0], argv[1:]).params
    kept = {"maps": "plot"}.get(argv[0], "csv")
    assert params[kept] is not None  # the figure's data kept
    if params.get("backends"):
        assert parse_backends(params["backends"])


# ------------------------------------------------------------------ interrupted or failing runs


@pytest.mark.parametrize(
    ("rounds", "stop_at", "kept"), [("1", 2, ["sdpa"]), ("3", 3, ["sdpa", "softmax"])]
)
def test_interrupt_between_cases_keeps_every_complete_row(
    tmp_path, monkeypatch, rounds, stop_at, kept
):
    """Interrupted as the `stop_at`-th case starts: the cases before it are kept whole, one
    by one, or in rounds as a length's whole group (n = 32 here)."""
    real_timer = time_study._timer
    calls = []

    def interrupted(case, fn):
        calls.append(fn)
        if len(calls) == stop_at:
            raise KeyboardInterrupt
        return real_timer(case, fn)

    monkeypatch.setattr(time_study, "_timer", interrupted)
    csv, js = tmp_path / "r.csv", tmp_path / "r.json"
    result = invoke(
        "time", "--seq", "32,64", *TINY, "--backends", "sdpa,softmax", "--rounds", rounds,
        "--csv", csv, "--json", js,
    )  # fmt: skip
    assert result.exit_code == 130, result.output
    assert "Traceback" not in result.output
    assert len(calls) == stop_at  # the sweep stopped at the interrupt
    assert files_under(tmp_path) == ["r.csv", "r.env.json", "r.json"]

    df = pd.read_csv(csv)
    assert list(df.columns[: len(COLUMNS)]) == COLUMNS
    assert sorted(df["metric"]) == sorted(sorted(TIME_METRICS) * len(kept))
    assert sorted(set(df["backend"])) == kept and (df["seq"] == 32).all()
    assert (df["status"] == "ok").all() and df["value"].notna().all()
    rows = json.loads(js.read_text())["rows"]
    assert [(r["backend"], r["seq"], r["metric"]) for r in rows] == list(
        zip(df["backend"], df["seq"], df["metric"], strict=True)
    )


def test_interrupt_says_so_on_stderr(tmp_path, monkeypatch):
    def interrupt(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(time_study, "_timer", interrupt)
    result = invoke("time", "--seq", "32", *TINY, "--backends", "sdpa")
    assert result.exit_code == 130
    assert "interrupted" in result.stderr


class _OsWithHalfWrites:
    """`os` as seen by attnbench.results.formats: the CSV write, whole (a temp file) or
    appended, that would bring the CSV to a chosen row count stops halfway."""

    def __init__(self, interrupt_at_rows: int):
        self.interrupt_at_rows, self.csv_rows = interrupt_at_rows, 0

    def __getattr__(self, name):
        return getattr(os, name)

    def fdopen(self, fd, *args, **kwargs):
        return _HalfWriter(os.fdopen(fd, *args, **kwargs), self)

    def pwrite(self, fd, data, offset):  # appended: CSV lines, or JSON rows and the tail
        data = bytes(data)
        if not data.startswith((b"\n", b",\n")):
            self.csv_rows += data.count(b"\n")
            if self.csv_rows == self.interrupt_at_rows:
                os.pwrite(fd, data[: len(data) // 2], offset)
                raise KeyboardInterrupt
        return os.pwrite(fd, data, offset)


class _HalfWriter:
    def __init__(self, file, fake_os: _OsWithHalfWrites):
        self.file, self.fake_os = file, fake_os

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.file.close()
        return False

    def __getattr__(self, name):  # flush, fileno: the file's own
        return getattr(self.file, name)

    def write(self, text: str) -> int:
        if text.startswith("study,"):
            self.fake_os.csv_rows = text.count("\n") - 1
            if self.fake_os.csv_rows == self.fake_os.interrupt_at_rows:
                self.file.write(text[: len(text) // 2])
                self.file.flush()
                raise KeyboardInterrupt
        return self.file.write(text)


def test_interrupt_during_a_write_leaves_the_previous_complete_file(tmp_path, monkeypatch):
    # a case's three rows are committed together: the write of the second case is cut
    monkeypatch.setattr(results_formats, "os", _OsWithHalfWrites(interrupt_at_rows=6))
    csv, js = tmp_path / "r.csv", tmp_path / "r.json"
    result = invoke(
        "time", "--seq", "32,64", *TINY, "--backends", "sdpa,softmax", "--csv", csv, "--json", js
    )
    assert result.exit_code == 130, result.output
    assert "Traceback" not in result.output
    assert files_under(tmp_path) == ["r.csv", "r.env.json", "r.json"]  # temp file removed
    df = pd.read_csv(csv)
    assert list(df.columns[: len(COLUMNS)]) == COLUMNS and len(df) == 3
    assert (df["backend"] == "sdpa").all() and sorted(df["metric"]) == sorted(TIME_METRICS)
    rows = json.loads(js.read_text())["rows"]
    assert [r["metric"] for r in rows[:3]] == list(df["metric"])
    json.loads((tmp_path / "r.env.json").read_text())


def test_a_failing_backend_is_recorded_and_the_sweep_goes_on(tmp_path, monkeypatch):
    real_forward = Softmax.forward

    def fails_at_32(self, q, k, v, mask=None):
        if q.shape[-2] == 32:
            raise RuntimeError("boom\nsecond line of the message")
        return real_forward(self, q, k, v, mask)

    monkeypatch.setattr(Softmax, "forward", fails_at_32)
    csv = tmp_path / "r.csv"
    result = invoke("time", "--seq", "32,64", *TINY, "--backends", "softmax,sdpa", "--csv", csv)
    assert_ok(result)
    df = pd.read_csv(csv, keep_default_na=False, na_values=[""])
    failed = df[df["status"] == "error"]
    assert len(failed) == 1
    row = failed.iloc[0]
    assert (row["backend"], row["seq"], row["metric"]) == ("softmax", 32, "time_ms")
    assert row["reason"] == "RuntimeError: boom"
    assert math.isnan(row["value"])
    ok = df[df["status"] == "ok"]
    got = sorted(zip(ok["backend"], ok["seq"], ok["metric"], strict=True))
    want = [("sdpa", 32), ("softmax", 64), ("sdpa", 64)]
    assert got == sorted((b, n, m) for b, n in want for m in TIME_METRICS)


def test_a_failing_backend_in_the_error_study_is_recorded_and_the_study_goes_on(
    tmp_path, monkeypatch
):
    real_forward = Softmax.forward

    def fails_at_32(self, q, k, v, mask=None):
        if q.shape[-2] == 32:
            raise RuntimeError("boom\nsecond line")
        return real_forward(self, q, k, v, mask)

    monkeypatch.setattr(Softmax, "forward", fails_at_32)
    csv = tmp_path / "r.csv"
    result = invoke(
        "error", "--seq", "16..64", "--trials", "1", "--heads", "1", "--dim", "8",
        "--backends", "softmax,sdpa", "--csv", csv,
    )  # fmt: skip
    assert_ok(result)
    df = pd.read_csv(csv, keep_default_na=False, na_values=[""])
    failed = df[df["status"] != "ok"]
    assert len(failed) == 1
    row = failed.iloc[0]
    assert (row["backend"], row["seq"], row["status"]) == ("softmax", 32, "error")
    assert (row["metric"], row["reason"]) == ("radian_vs_softmax", "RuntimeError: boom")
    ok = df[df["status"] == "ok"]
    assert set(zip(ok["backend"], ok["seq"], strict=True)) == {
        (b, n) for b in ("softmax", "sdpa") for n in (16, 32, 64)
    } - {("softmax", 32)}


def test_time_on_image_grids(tmp_path):
    csv, plot = tmp_path / "g.csv", tmp_path / "g.png"
    result = invoke(
        "time", "--grid", "4x4..8x8", "--backends", "sdpa,softmax", *TINY,
        "--csv", csv, "--plot", plot,
    )  # fmt: skip
    assert_ok(result)
    df = pd.read_csv(csv)
    times = df[df["metric"] == "time_ms"]
    assert sorted(set(zip(times["seq"], times["inputs"], strict=True))) == [
        (16, "random 4x4"),
        (64, "random 8x8"),
    ]
    assert (df["status"] == "ok").all() and plot.exists()


@pytest.mark.parametrize("source", ["blobs", "image:camera"])
def test_time_on_a_picture_repeats_it_over_batch_and_heads(tmp_path, source):
    csv = tmp_path / "g.csv"
    result = invoke(
        "time", "--grid", "8x12", "--inputs", source, "--backends", "sdpa,scram:kappa=2,b=1",
        "--repeats", "2", "--warmup", "1", "--batch", "2", "--heads", "3", "--dim", "3",
        "--csv", csv,
    )  # fmt: skip
    assert_ok(result)
    df = pd.read_csv(csv)
    assert (df["inputs"] == f"{source} 8x12").all() and (df["seq"] == 96).all()
    assert (df["batch"] == 2).all() and (df["heads"] == 3).all() and (df["dim"] == 3).all()
    assert (df["status"] == "ok").all()
    assert set(df["backend"].str.split(":").str[0]) == {"sdpa", "scram"}


def test_time_refuses_seq_and_grid_together(tmp_path):
    result = invoke("time", "--seq", "64", "--grid", "8x8", "--csv", tmp_path / "r.csv")
    assert result.exit_code == 2 and "--seq and --grid" in result.output
    assert files_under(tmp_path) == []


def test_error_on_image_grids_reports_scram_search_metrics(tmp_path):
    csv = tmp_path / "e.csv"
    result = invoke(
        "error", "--inputs", "blobs", "--grid", "16x16", "--hashes", "8", "--trials", "1",
        "--dim", "3", "--backends", "scram:kappa=2,b=1,sparse-strided", "--csv", csv,
    )  # fmt: skip
    assert_ok(result)
    df = pd.read_csv(csv)
    assert (df["inputs"] == "blobs 16x16").all() and (df["seq"] == 256).all()
    scram = df[df["backend"].str.startswith("scram")].set_index("metric")["value"]
    assert 0.9 <= scram["argmax_hit_rate"] <= 1 and 0.9 <= scram["recall_at_kappa"] <= 1
    assert 0 < scram["captured_mass_vs_softmax"] <= 1
    strided = df[df["backend"].str.startswith("sparse-strided")]
    assert "argmax_hit_rate" not in set(strided["metric"])  # only searching backends have it


def test_error_lists_what_did_not_fit_as_skipped(tmp_path, monkeypatch):
    monkeypatch.setattr(case_worker, "available_bytes", lambda device: 1)  # room for nothing
    csv = tmp_path / "e.csv"
    result = invoke(
        "error", "--seq", "32", "--trials", "1", "--heads", "1",
        "--backends", "softmax,sdpa", "--csv", csv,
    )  # fmt: skip
    assert_ok(result)
    assert "skipped (needs ~" in result.output
    df = pd.read_csv(csv)
    softmax = df[df["backend"] == "softmax"]
    assert list(softmax["status"]) == ["skipped"] and softmax["value"].isna().all()
    assert (df[df["backend"] != "softmax"]["status"] == "ok").all()  # sdpa's rows still ran


def test_error_reports_monte_carlo_bias_spread_and_sampler_diagnostics(tmp_path):
    csv = tmp_path / "e.csv"
    result = invoke(
        "error", "--inputs", "blobs", "--grid", "12x12", "--hashes", "8", "--trials", "1",
        "--dim", "3", "--mc-seeds", "6", "--csv", csv, "--backends",
        "scram-snis:samples=8,scram-snis:samples=512,scram-mh:samples=32,sdpa",
    )  # fmt: skip
    assert_ok(result)
    df = pd.read_csv(csv)
    value = df.set_index(["backend", "metric"])["value"]
    few, many = (f"scram-snis:kappa=4,variant=mode,L=2,T=8,jumps=8/4/2/1,samples={s},"
                 "alpha=0.9,phi=1.5,seed=0" for s in (8, 512))  # fmt: skip
    # both the bias and the spread over seeds shrink as the sampler draws more keys
    assert value[many, "mc_bias_vs_softmax"] < value[few, "mc_bias_vs_softmax"]
    assert value[many, "mc_std_vs_softmax"] < value[few, "mc_std_vs_softmax"] / 3
    assert 1 <= value[few, "ess"] <= 8 and value[many, "ess"] > value[few, "ess"]
    mh = df[df["backend"].str.startswith("scram-mh")].set_index("metric")["value"]
    assert 0 < mh["acceptance_rate"] < 1 and mh["mc_std_vs_softmax"] > 0
    exact = set(df[df["backend"] == "sdpa"]["metric"])
    assert not exact & {"mc_bias_vs_softmax", "ess", "acceptance_rate"}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--inputs", "blobs"], "give its size with --grid"),
        (["--inputs", "image:nope", "--grid", "8x8"], "unknown image"),
        (["--seq", "64", "--grid", "8x8"], "--seq and --grid"),
    ],
)
def test_error_image_input_mistakes(tmp_path, args, message):
    result = invoke("error", *args, "--csv", tmp_path / "e.csv")
    assert result.exit_code == 2 and message in result.output
    assert files_under(tmp_path) == []


# ------------------------------------------------------------------ startup, isolation, reference


def test_version_prints_the_package_version():
    result = invoke("--version")
    assert_ok(result)
    assert result.stdout.strip() == f"attnbench {importlib.metadata.version('attnbench')}"


def test_help_imports_no_heavy_library():
    """`--help` answers at once: torch, numba, pandas and matplotlib load inside commands."""
    code = (
        "import sys\n"
        "from attnbench.cli import main\n"
        "sys.argv = ['attnbench', '--help']\n"
        "try:\n"
        "    main()\n"
        "except SystemExit:\n"
        "    pass\n"
        "heavy = ('torch', 'numba', 'pandas', 'matplotlib')\n"
        "print(sorted(m for m in heavy if m in sys.modules))\n"
    )
    root = Path(__file__).parents[1]
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=root, check=True
    )
    assert "Usage" in done.stdout and done.stdout.strip().endswith("[]")


def test_time_isolate_runs_each_case_apart_with_the_same_rows(tmp_path):
    csv = tmp_path / "r.csv"
    args = ["time", "--seq", "16", *TINY, "--backends", "sdpa,yoso-e", "--csv", csv]
    assert_ok(invoke(*args, "--isolate"))
    df = pd.read_csv(csv)
    assert (df["status"] == "ok").all()
    assert sorted(zip(df["backend"].map(base_name), df["metric"], strict=True)) == sorted(
        (b, m) for b in ("sdpa", "yoso-e") for m in TIME_METRICS
    )


def test_error_isolate_gives_the_rows_of_an_in_process_run(tmp_path):
    args = ["error", "--seq", "16", "--trials", "2", "--heads", "1", "--dim", "8"]
    args += ["--backends", "yoso-8,sdpa"]
    frames = []
    for extra in ([], ["--isolate"]):
        csv = tmp_path / f"e{len(extra)}.csv"
        assert_ok(invoke(*args, *extra, "--csv", csv))
        frames.append(pd.read_csv(csv).set_index(["backend", "metric"])["value"])
    pd.testing.assert_series_equal(frames[0], frames[1])


def test_error_reference_option_names_the_metrics(tmp_path):
    csv = tmp_path / "e.csv"
    result = invoke(
        "error", "--seq", "16", "--trials", "1", "--heads", "1", "--dim", "8",
        "--backends", "softmax", "--reference", "yoso-e:tau=4", "--csv", csv,
    )  # fmt: skip
    assert_ok(result)
    df = pd.read_csv(csv)
    assert set(df["metric"]) == {f"{m}_vs_yoso_e" for m in ("radian", "rel_frobenius", "max_abs")}


def test_the_cpu_allocator_running_out_is_an_oom_row_shown_as_written(tmp_path, monkeypatch):
    message = (
        "[enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't allocate "
        "memory: you tried to allocate 1073741824 bytes. Error code 12 (Cannot allocate memory)"
    )

    def out_of_memory(self, q, k, v, mask=None):
        raise RuntimeError(message)

    monkeypatch.setattr(cli, "console", Console(width=400))
    monkeypatch.setattr(Softmax, "forward", out_of_memory)
    csv = tmp_path / "r.csv"
    result = invoke("time", "--seq", "32", *TINY, "--backends", "softmax,sdpa", "--csv", csv)
    assert_ok(result)
    df = pd.read_csv(csv, keep_default_na=False, na_values=[""])
    status = dict(zip(df["backend"] + " " + df["metric"], df["status"], strict=True))
    assert status["softmax time_ms"] == "oom" and status["sdpa time_ms"] == "ok"
    assert df.loc[df["backend"] == "softmax", "reason"].tolist() == [message]
    assert f"oom ({message})" in result.stdout  # not eaten as rich markup


def test_scram_runs_on_a_sequence_in_the_error_study(tmp_path):
    """A sequence is a 1 x n grid to scram: its row-block maps used to fail without a grid."""
    csv = tmp_path / "e.csv"
    result = invoke(
        "error", "--hashes", "8", "--seq", "64", "--trials", "1", "--heads", "1", "--dim", "8",
        "--mc-seeds", "1", "--backends", "scram:kappa=2", "--csv", csv,
    )  # fmt: skip
    assert_ok(result)
    df = pd.read_csv(csv)
    assert (df["status"] == "ok").all()
    scram = df[df["backend"].str.startswith("scram")].set_index("metric")["value"]
    assert {"captured_mass_vs_softmax", "argmax_hit_rate", "recall_at_kappa"} <= set(scram.index)
    assert 0 < scram["recall_at_kappa"] <= 1


def _stability_run(tmp_path, max_spread: str):
    csv = tmp_path / f"s{len(max_spread)}.csv"
    args = ["time", "--seq", "16,32", "--repeats", "6", "--min-time", "0", "--warmup", "1"]
    args += ["--heads", "1", "--dim", "8", "--backends", "softmax,sdpa", "--csv", csv]
    result = invoke(*args, "--max-spread", max_spread)
    assert_ok(result)
    return result, pd.read_csv(csv)


def test_a_spread_above_max_spread_is_flagged_in_rows_table_and_a_warning(tmp_path):
    result, df = _stability_run(tmp_path, "0%")  # any two different samples exceed it
    times = df[df["metric"] == "time_ms"]
    assert (times["stable"] == False).all() and (times["spread"] > 0).all()  # noqa: E712
    assert "unstable" in result.stdout
    warning = [line for line in result.stderr.splitlines() if line.startswith("warning:")]
    assert len(warning) == 1 and "4 case(s) unstable" in warning[0]
    assert "softmax n=16" in warning[0] and "likely cause:" in warning[0]


def test_a_spread_within_max_spread_is_not_flagged(tmp_path, monkeypatch):
    from attnbench.measure import conditions

    real = conditions._wait_share
    waits = []  # the real shares are recorded; the verdict here is the spread's alone
    monkeypatch.setattr(conditions, "_wait_share", lambda *a: waits.append(real(*a)) or 0.0)
    result, df = _stability_run(tmp_path, "100000%")
    times = df[df["metric"] == "time_ms"]
    assert (times["stable"] == True).all()  # noqa: E712
    assert "warning:" not in result.stderr and "unstable" not in result.stdout
    # the host's conditions around each case are in its row
    assert times[["load_before", "load_after"]].notna().all().all()
    # one reading a length: its two backends take turns in rounds, in one stretch of time
    assert len(waits) == 2 and all(w is None or 0 <= w <= 1 for w in waits)
    assert times.groupby("seq")["cpu_wait"].nunique(dropna=False).eq(1).all()


def test_steady_samples_taken_while_waiting_for_a_cpu_are_flagged(tmp_path, monkeypatch):
    """Other processes holding the CPUs slow every sample alike, so the spread stays small:
    the threads' wait for a CPU marks the case unstable and is named as the cause."""
    from attnbench.measure import conditions

    monkeypatch.setattr(conditions, "_wait_share", lambda before, after: 0.4)
    result, df = _stability_run(tmp_path, "100000%")
    times = df[df["metric"] == "time_ms"]
    assert (times["stable"] == False).all() and (times["cpu_wait"] == 0.4).all()  # noqa: E712
    assert "unstable" in result.stdout and "!" not in result.stdout  # spread itself is fine
    warning = [line for line in result.stderr.splitlines() if line.startswith("warning:")]
    assert len(warning) == 1 and "CPU wait 40%" in warning[0]
    assert "waited for a CPU up to 40% of the time" in warning[0]


def test_min_time_gives_fast_calls_more_samples_than_repeats(tmp_path):
    csv = tmp_path / "r.csv"
    args = ["time", "--seq", "16", "--repeats", "3", "--min-time", "0.05", "--warmup", "1"]
    assert_ok(invoke(*args, "--heads", "1", "--dim", "8", "--backends", "sdpa", "--csv", csv))
    count = pd.read_csv(csv).set_index("metric").loc["time_ms", "count"]
    assert count > 3


@pytest.mark.parametrize(
    ("option", "value"),
    [("--min-time", "-1"), ("--min-time", "nan"), ("--min-time", "1e9"),
     ("--max-spread", "abc"), ("--max-spread", "-5%"), ("--max-spread", "2")],
)  # fmt: skip
def test_bad_min_time_and_max_spread_are_one_line_errors(tmp_path, option, value):
    result = invoke("time", "--seq", "16", option, value, "--csv", tmp_path / "r.csv")
    assert_one_line_error(result, option)
    assert not list(tmp_path.iterdir())


def test_resume_runs_only_the_cases_the_file_lacks(tmp_path):
    csv = tmp_path / "r.csv"
    args = ["time", *TINY, "--backends", "sdpa,softmax", "--csv", csv]
    assert_ok(invoke(*args, "--seq", "16,32"))
    first = pd.read_csv(csv)
    assert_ok(invoke(*args, "--seq", "16,32,64", "--resume"))
    second = pd.read_csv(csv)
    kept = second[second["seq"] < 64].reset_index(drop=True)
    # the completed cases are kept exactly as measured (same samples, same run id)
    pd.testing.assert_frame_equal(kept[first.columns], first)
    new = second[second["seq"] == 64]
    assert len(new) == 6 and (new["run_id"] != first["run_id"].iloc[0]).all()


@pytest.mark.parametrize(
    ("first", "then", "needle"),
    [
        (["--repeats", "2"], ["--repeats", "3"], "the study's options"),
        ([], ["--dim", "16"], "dim 8 in the file, 16 here"),
        (["--seq", "16,32"], ["--seq", "16"], "holds 1 case(s) this run would not make"),
        ("error", [], "study error in the file, time here"),
    ],
    ids=["repeats", "dim", "fewer-sizes", "other-study"],
)
def test_resume_refuses_a_file_of_other_cases(tmp_path, first, then, needle):
    """Resuming with other options, or into another study's file, exited 0 and mixed rows."""
    csv = tmp_path / "r.csv"
    if first == "error":
        args = ["error", "--hashes", "8", "--seq", "16", "--trials", "1", "--heads", "1"]
        assert_ok(invoke(*args, "--dim", "8", "--backends", "sdpa", "--csv", csv))
        first = []
    else:
        assert_ok(invoke("time", *TINY, "--seq", "16", "--backends", "sdpa", *first, "--csv", csv))
    before = pd.read_csv(csv)
    result = invoke("time", *TINY, "--seq", "16", "--backends", "sdpa", *then, "--csv", csv,
                    "--resume")  # fmt: skip
    assert_one_line_error(result, needle)
    assert "--resume:" in result.stderr
    pd.testing.assert_frame_equal(pd.read_csv(csv), before)


def test_resume_needs_an_output_file():
    assert_one_line_error(invoke("time", "--seq", "16", "--resume"), "--resume")


@pytest.mark.parametrize(("inputs", "grid"), [("svd:camera", "1x32"), ("three-blobs", "8x8")])
def test_the_scram_figure_inputs_run_in_time_and_error(tmp_path, inputs, grid):
    settings = {
        "time": ["--repeats", "2", "--min-time", "0", "--warmup", "1"],
        "error": ["--hashes", "8", "--trials", "1"],
    }
    for study, extra in settings.items():
        csv = tmp_path / f"{study}.csv"
        result = invoke(
            study, "--inputs", inputs, "--grid", grid, "--dim", "4", *extra,
            "--backends", "scram:kappa=2", "--csv", csv,
        )  # fmt: skip
        assert_ok(result)
        df = pd.read_csv(csv)
        assert (df["status"] == "ok").all() and df["inputs"].str.startswith(inputs).all()


def test_time_table_names_image_sizes_and_why_a_speedup_is_missing(tmp_path, monkeypatch):
    monkeypatch.setattr(cli, "console", Console(width=200))
    result = invoke("time", *TINY[:6], "--seq", "32", "--backends", "softmax")
    assert_ok(result)
    assert "speed-up: none, sdpa (--baseline) was not among the backends of this run" in (
        result.stdout
    )
    result = invoke("time", *TINY[:6], "--grid", "8x8", "--inputs", "blobs", "--dim", "3",
                    "--backends", "sdpa,softmax")  # fmt: skip
    assert_ok(result)
    header = next(line for line in result.stdout.splitlines() if "backend" in line)
    assert "image" in header and " n " not in header
    assert any(line.split()[:2] == ["softmax", "8×8"] for line in result.stdout.splitlines())
    assert "speed-up" not in result.stdout.split("status")[-1]  # no gap, no caption


def test_backends_answers_from_its_cache_and_rebuilds_it_when_backends_change(monkeypatch):
    """`attnbench backends` took seconds (it imported torch through every backend)."""
    import attnbench.backends as registry
    import attnbench.cli.backends as listing

    monkeypatch.setattr(cli, "console", Console(width=200))
    assert_ok(invoke("backends"))  # fills the cache for this install

    def no_import():
        raise AssertionError("read the classes although the cache matched")

    monkeypatch.setattr(registry, "backend_classes", no_import)
    cached = invoke("backends")
    assert_ok(cached)
    assert "yoso-N sets m" in cached.stdout
    monkeypatch.setattr(listing, "_installed_state", lambda: "another-install")
    changed = invoke("backends")
    assert changed.exit_code != 0 and "read the classes" in repr(changed.exception)
