"""Inputs made to break the tool: damaged or crafted files, odd digits, sizes past the
sequence, values near float32's limit, a read-only numba cache.

Each was once a traceback, a run that measured NaN and called it ok, gigabytes spent on a
64-token case, or a checkpoint of NaN weights written. Now a mistake is one `error:` line,
exit 2, nothing written; a result that is not a number is not `ok`.
"""

from __future__ import annotations

import io
import math
import os
import pickle
import subprocess
import sys
import warnings
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
import torch
from typer.testing import CliRunner

import attnbench.cli.core as cli
from attnbench.backends.registry import backend_classes, get_backend
from attnbench.errors import UsageError
from attnbench.inputs import Inputs, trained
from attnbench.inputs.files import load_qkv
from attnbench.nn.mlm import MaskedLM, MLMConfig, checkpoint_bytes, read

runner = CliRunner()
ERROR = ["error", "--backends", "softmax", "--trials", "1", "--mc-seeds", "1", "--csv", "r.csv"]


def files_under(root: Path) -> set[Path]:
    return {p.relative_to(root) for p in root.rglob("*")}


def refused(args, root: Path, needle: str = "", progress: bool = False) -> str:
    """Run the CLI; assert one `error:` line, exit 2, no traceback, nothing written. With
    `progress`, a progress bar ran and left its blank line (rich's, off a terminal)."""
    before = files_under(root)
    result = runner.invoke(cli.app, args)
    assert result.exit_code == 2, result.output
    assert isinstance(result.exception, SystemExit), repr(result.exception)
    lines = [line for line in result.stderr.splitlines() if line or not progress]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert needle in lines[0] and "Traceback" not in result.output
    assert files_under(root) == before
    return lines[0]


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return tmp_path


# --- a model:yoso-mlm checkpoint, replaced by a user's (the package's file, or a copy) ---

TINY = MLMConfig(layers=2, width=16, hidden=16, heads=2, positions=64, tau=8)


def saved_checkpoint() -> dict:
    """A valid checkpoint of an untrained TINY model, as `attnbench train --checkpoint` writes."""
    buffer = io.BytesIO(checkpoint_bytes(MaskedLM(TINY), {"steps": 0}))
    return torch.load(buffer, weights_only=True)


class Payload:
    """Unpickling this would run code: touch a file named by the test."""

    def __init__(self, marker: str):
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (Path(self.marker),))


def _set(path: tuple, value):
    def change(saved):
        where = saved
        for key in path[:-1]:
            where = where[key]
        where[path[-1]] = value

    return change


def _drop(*path):
    def change(saved):
        where = saved
        for key in path[:-1]:
            where = where[key]
        del where[path[-1]]

    return change


def _nan_weights(saved):
    saved["state"]["blocks.0.attention.qkv.weight"][0, 0] = float("nan")


def _inf_weights(saved):
    saved["state"]["tokens.weight"][3, 1] = float("inf")


QKV = "blocks.0.attention.qkv.weight"
CHANGES = {
    "no-config": (_drop("config"), "no 'config'"),
    "no-state": (_drop("state"), "no 'state'"),
    "unknown-top-key": (_set(("optimizer",), {}), "unknown key 'optimizer'"),
    "config-not-dict": (_set(("config",), [1, 2]), "config is a list"),
    "config-heads-0": (_set(("config", "heads"), 0), "heads=0"),
    "config-layers-0": (_set(("config", "layers"), 0), "layers=0"),
    "config-width-string": (_set(("config", "width"), "16"), "width='16'"),
    "config-width-float": (_set(("config", "width"), 16.0), "width=16.0"),
    "config-layers-bool": (_set(("config", "layers"), True), "layers=True"),
    "config-positions-huge": (_set(("config", "positions"), 10**12), "positions="),
    "config-tau-none": (_set(("config", "tau"), None), "trained with YOSO"),
    "config-tau-99": (_set(("config", "tau"), 99), "tau=99"),
    "config-rotary-string": (_set(("config", "rotary"), "yes"), "rotary="),
    "config-width-not-multiple": (_set(("config", "heads"), 3), "not a multiple"),
    "config-unknown-key": (_set(("config", "depth"), 3), "unknown config key 'depth'"),
    "config-missing-width": (_drop("config", "width"), "no 'width'"),
    "config-width-changed": (_set(("config", "width"), 32), "shape"),
    "config-model-huge": (_set(("config", "width"), 8192), "weights"),
    "state-not-dict": (_set(("state",), [1]), "state is a list"),
    "state-missing-key": (_drop("state", QKV), f"no '{QKV}'"),
    "state-extra-key": (_set(("state", "extra.weight"), torch.zeros(2)), "'extra.weight'"),
    "state-wrong-shape": (_set(("state", QKV), torch.zeros(48, 8)), "shape (48, 8)"),
    "state-not-tensor": (_set(("state", QKV), [0.0]), "not a tensor"),
    "state-int-tensor": (_set(("state", QKV), torch.zeros(48, 16, dtype=torch.int32)), "int32"),
    "state-meta-tensor": (_set(("state", QKV), torch.empty(48, 16, device="meta")), "meta"),
    "state-nan": (_nan_weights, "NaN or inf"),
    "state-inf": (_inf_weights, "NaN or inf"),
}


@pytest.fixture
def user_checkpoint(workdir, monkeypatch):
    """Where model:yoso-mlm reads its checkpoint, pointed at a file the test writes."""
    path = workdir / "ckpt" / "user.pt"
    path.parent.mkdir()
    monkeypatch.setattr(trained, "CHECKPOINT", path)
    return path


@pytest.mark.parametrize("change", CHANGES.values(), ids=CHANGES.keys())
def test_a_bad_checkpoint_is_one_error_line(user_checkpoint, workdir, change):
    alter, needle = change
    saved = saved_checkpoint()
    alter(saved)
    torch.save(saved, user_checkpoint)
    line = refused([*ERROR, "--inputs", "model:yoso-mlm", "--seq", "16"], workdir, needle)
    assert "model:yoso-mlm" in line


RAW = {
    "empty": lambda good: b"",
    "garbage": lambda good: bytes(range(64)) + b"\x80\x02garbage",
    "text": lambda good: b"not a checkpoint\n",
    "truncated": lambda good: good[: len(good) // 2],
    "truncated-tail": lambda good: good[:-10],
    "pickle-payload": lambda good: pickle.dumps({"config": Payload("pwned")}),
}


@pytest.mark.parametrize("make", RAW.values(), ids=RAW.keys())
def test_an_unreadable_checkpoint_is_one_error_line_and_runs_no_code(
    user_checkpoint, workdir, make
):
    user_checkpoint.write_bytes(make(checkpoint_bytes(MaskedLM(TINY), {})))
    refused([*ERROR, "--inputs", "model:yoso-mlm", "--seq", "16"], workdir, "checkpoint")
    assert not (workdir / "pwned").exists()


def test_a_pickle_payload_inside_torch_save_is_refused_unrun(user_checkpoint, workdir):
    torch.save({"config": Payload("pwned"), "state": {}}, user_checkpoint)
    refused([*ERROR, "--inputs", "model:yoso-mlm", "--seq", "16"], workdir, "could run code")
    assert not (workdir / "pwned").exists()


def test_a_valid_small_checkpoint_and_one_without_rotary_are_read(user_checkpoint):
    saved = saved_checkpoint()
    torch.save(saved, user_checkpoint)
    q, k, v = Inputs("model:yoso-mlm:layer=1", 1, 1, 1).draw(32, 0, None)
    assert q.shape == (1, 2, 32, 8) and all(torch.isfinite(t).all() for t in (q, k, v))
    del saved["config"]["rotary"]  # from before rotary positions: sinusoids
    torch.save(saved, user_checkpoint)
    assert torch.isfinite(Inputs("model:yoso-mlm", 1, 1, 1).draw(16, 1, None)[0]).all()


def test_the_shipped_checkpoint_passes_its_checks():
    saved = read(trained.CHECKPOINT)
    assert Inputs("model:yoso-mlm", 1, 1, 1).positions == saved["config"]["positions"]


# --- q, k, v files ---


def _npz(path, **arrays):
    np.savez(path, **arrays)


def _pt(path, **tensors):
    torch.save(tensors, path)


A = np.ones((8, 4), dtype=np.float32)
T = torch.ones(8, 4)
with warnings.catch_warnings():  # nested tensors are a prototype, and torch says so
    warnings.simplefilter("ignore")
    NESTED = torch.nested.nested_tensor([torch.ones(2, 4), torch.ones(3, 4)])
FILES = {
    "npz-garbage": ("x.npz", lambda p: p.write_bytes(b"\x00garbage" * 10), "not a .npz archive"),
    "npz-is-npy": ("x.npz", lambda p: np.save(open(p, "wb"), A), "not a .npz archive"),
    "npz-objects": (
        "x.npz",
        lambda p: _npz(p, q=np.array([{}], dtype=object), k=A, v=A),
        "Python objects",
    ),  # fmt: skip
    "npz-is-pt": ("x.npz", lambda p: _pt(p, q=T, k=T, v=T), "not a .npz"),
    "npz-strings": ("x.npz", lambda p: _npz(p, q=np.array(["a"]), k=A, v=A), "not a numeric"),
    "npz-no-v": ("x.npz", lambda p: _npz(p, q=A, k=A), "named q, k and v"),
    "npz-huge-values-inf": ("x.npz", lambda p: _npz(p, q=A * np.inf, k=A, v=A), "NaN or inf"),
    "pt-garbage": ("x.pt", lambda p: p.write_bytes(b"\x80\x02garbage" * 20), "torch.save"),
    "pt-meta": ("x.pt", lambda p: _pt(p, q=torch.empty(8, 4, device="meta"), k=T, v=T), "meta"),
    "pt-nested": ("x.pt", lambda p: _pt(p, q=NESTED, k=NESTED, v=NESTED), "nested"),
    "pt-sparse": ("x.pt", lambda p: _pt(p, q=T.to_sparse(), k=T, v=T), "sparse"),
    "pt-payload": ("x.pt", lambda p: p.write_bytes(pickle.dumps(Payload("pwned"))), "--inputs"),
    "pt-complex": ("x.pt", lambda p: _pt(p, q=T.to(torch.complex64), k=T, v=T), "floating"),
}


@pytest.mark.parametrize("case", FILES.values(), ids=FILES.keys())
def test_a_bad_qkv_file_is_one_error_line(workdir, case):
    name, write, needle = case
    write(workdir / name)
    refused([*ERROR, "--inputs", name, "--seq", "4"], workdir, needle)
    assert not (workdir / "pwned").exists()


def test_a_big_endian_npz_is_read_in_native_byte_order(workdir):
    values = np.arange(32, dtype=">f4").reshape(8, 4)
    np.savez(workdir / "be.npz", q=values, k=values, v=values.astype(">f8"))
    q, k, v = load_qkv(workdir / "be.npz")
    assert torch.equal(q[0, 0], torch.arange(32.0).reshape(8, 4)) and v.dtype == torch.float64


# --- backend parameters: ASCII digits only, each bounded by what it means ---

NOT_ASCII = {"fullwidth": "\uff13", "arabic-indic": "\u0663", "underscore": "1_0", "plus": "+3"}


def _int_params() -> list[tuple[str, str]]:
    """(backend, parameter) for every parameter that reads integers (a count, a size, a
    seed, tau, a list of steps): those taking "3" or "1" as a number."""
    found = []
    for name, cls in backend_classes().items():
        for key, param in cls.params.items():
            for text in ("3", "1"):
                try:
                    value = param.parse(text)
                except ValueError:
                    continue
                if isinstance(value, int | tuple):
                    found.append((name, key))
                break
    return found


@pytest.mark.parametrize("text", NOT_ASCII.values(), ids=NOT_ASCII.keys())
@pytest.mark.parametrize(("backend", "key"), _int_params())
def test_integer_parameters_take_ascii_digits_only(backend, key, text):
    with pytest.raises(UsageError, match=f"bad {key}="):
        get_backend(f"{backend}:{key}={text}")


@pytest.mark.parametrize("text", ["\uff10.5", "0_5", "nan", "inf", "-inf", "0x1", "1e999"])
@pytest.mark.parametrize("key", ["alpha", "phi"])
def test_real_parameters_take_finite_ascii_numbers_only(key, text):
    with pytest.raises(UsageError, match=f"bad {key}="):
        get_backend(f"scram-snis:{key}={text}")


@pytest.mark.parametrize("spec", ["yoso-\uff13\uff12", "longformer-1_0", "scram:jumps=\uff18/4"])
def test_a_shorthand_or_list_takes_ascii_digits_only(spec):
    with pytest.raises(UsageError):
        get_backend(spec)


@pytest.mark.parametrize("kind", ["clustered:size=\uff18", "clustered:size=\u00b2",
                                  "clustered:size=1_0", "model:yoso-mlm:layer=\u0661"])  # fmt: skip
def test_input_options_take_ascii_digits_only(kind):
    with pytest.raises(UsageError, match="non-negative integer"):
        Inputs(kind, 1, 1, 4)


def _case(n: int, grid=None):
    return SimpleNamespace(n=n, grid=grid)


# (spec, n or (H, W)): each one past what it means at that size
PAST = {
    "sparse-strided:l=9999": 64,
    "sparse-strided:l=65": 64,
    "sparse-fixed:l=65": 64,
    "sparse-fixed:c=65": 64,
    "longformer:global=99999": 64,
    "longformer:global=65": 64,
    "longformer:window=99999": 64,
    "longformer:window=2049": 1024,
    "linformer:k=257": 64,
    "linformer:k=1025": 1024,
    "reformer:bucket=65": 64,
    "reformer:bucket=1025": 1024,
    "nystromformer:landmarks=65": 64,
    "nystromformer:conv=129": 64,
    "yoso-c:conv=129": 64,
    "yoso:bound=257": 64,
    "scram:L=9": (8, 8),
    "scram-snis:L=9": (8, 8),
    "scram-mh:step=9": (8, 8),
}
# ... and at its bound, accepted
AT = {
    "sparse-strided:l=64": 64,
    "sparse-fixed:l=64,c=64": 64,
    "longformer:global=64,window=128": 64,
    "longformer:window=512": 16,
    "linformer:k=256": 16,
    "reformer:bucket=64": 16,
    "nystromformer:landmarks=64,conv=33": 8,
    "nystromformer:conv=127": 64,
    "yoso-c:conv=127": 64,
    "yoso:bound=256": 16,
    "scram:L=8": (8, 8),
    "scram-mh:step=8,L=8": (8, 8),
}


def _at(size):
    return _case(size[0] * size[1], size) if isinstance(size, tuple) else _case(size)


@pytest.mark.parametrize(("spec", "size"), PAST.items(), ids=PAST.keys())
def test_a_size_past_the_case_is_refused_before_any_work(spec, size):
    with pytest.raises(UsageError, match="is above"):
        get_backend(spec).validate(_at(size))


@pytest.mark.parametrize(("spec", "size"), AT.items(), ids=AT.keys())
def test_a_size_at_its_bound_is_accepted(spec, size):
    get_backend(spec).validate(_at(size))


@pytest.mark.parametrize(
    "args",
    [
        ["--seq", "64", "--backends", "sparse-strided:l=9999"],
        ["--seq", "64", "--backends", "longformer:global=99999"],
        ["--seq", "64..128", "--backends", "sparse-fixed:l=100"],
        ["--seq", "64", "--inputs", "clustered:size=99999999999"],
        ["--seq", "64", "--inputs", "clustered:size=65"],
    ],
)
def test_the_cli_refuses_sizes_past_the_sequence(workdir, args):
    refused([*ERROR, *args], workdir)


def test_scram_mc_samples_are_bounded():
    with pytest.raises(UsageError, match="bad samples"):
        get_backend("scram-snis:samples=99999999")


# --- results that are not numbers are not `ok` ---


def test_huge_inputs_give_error_rows_not_ok_nan(workdir):
    big = np.full((16, 4), 3e38, dtype=np.float32)
    np.savez(workdir / "big.npz", q=big, k=big, v=big)
    result = runner.invoke(cli.app, [*ERROR, "--inputs", "big.npz", "--seq", "16"])
    assert result.exit_code == 0, result.output
    rows = pd.read_csv(workdir / "r.csv")
    assert not rows.empty and (rows["status"] != "ok").all()
    assert rows["reason"].str.startswith("non-finite").all() and rows["value"].isna().all()


def test_finite_rows_stay_ok():
    from attnbench.results.schema import Row
    from attnbench.studies.error import _mark_non_finite

    base = dict(study="error", backend="b", impl="torch", device="cpu", dtype="float32",
                mode="fwd", inputs="x", batch=1, heads=1, seq=4, dim=4, metric="m")  # fmt: skip
    assert _mark_non_finite(Row(**base, value=0.5, samples=[0.5])).status == "ok"
    row = _mark_non_finite(Row(**base, value=0.5, std=math.inf, samples=[0.5, math.inf]))
    assert row.status == "error" and row.samples == [] and row.value is None


# --- train: a learning rate or a step that cannot train ---

TRAIN = ["train", "--steps", "2", "--evals", "1", "--layers", "1", "--width", "8",
         "--heads", "1", "--hidden", "8", "--lengths", "32", "--tokens", "64",
         "--checkpoint", "m.pt", "--csv", "t.csv", "--plot", "t.png"]  # fmt: skip


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--lr", "inf"], "--lr"),
        (["--lr", "nan"], "--lr"),
        (["--lr", "-1"], "--lr"),
        (["--tokens", "10", "--lengths", "64"], "--tokens 10"),
        (["--tokens", "63", "--lengths", "32,64"], "--tokens 63"),
        (["--max-seconds", "nan"], "--max-seconds"),
    ],
)
def test_train_refuses_what_cannot_train(workdir, args, needle):
    line = refused([*TRAIN, *args], workdir)
    assert needle in line or "Invalid value" in line


def test_train_stops_at_a_non_finite_loss_and_writes_no_checkpoint(workdir, monkeypatch):
    import attnbench.studies.train as study

    def diverging(run, text, held, on_step):
        on_step({"step": 1, "loss": 5.0, "lr": run.lr, "seconds": 0.0})
        on_step({"step": 2, "loss": math.nan, "lr": run.lr, "seconds": 0.0})
        raise AssertionError("training went on past a NaN loss")

    monkeypatch.setattr(study, "train", diverging)
    refused(TRAIN, workdir, "loss is nan at step 2", progress=True)


# --- a read-only install: numba's cache cannot be written ---


def test_no_writable_numba_cache_compiles_without_one(monkeypatch, capsys):
    from numba.core import caching

    from attnbench.kernels import jitcache

    monkeypatch.setattr(caching.CacheImpl, "_locator_classes", [])
    monkeypatch.setattr(jitcache, "_told", False)

    def double(x):
        return 2 * x

    kernels = [jitcache.cached_njit()(double), jitcache.cached_njit(parallel=False)(double)]
    assert [k(3) for k in kernels] == [6, 6]
    told = [line for line in capsys.readouterr().err.splitlines() if "NUMBA_CACHE_DIR" in line]
    assert len(told) == 1  # said once


def test_kernels_import_with_an_unwritable_numba_cache_dir(tmp_path):
    (tmp_path / "file").write_text("")  # a folder under a file cannot be made, even by root
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "file" / "cache"),
           "NUMBA_CACHE_LOCATOR_CLASSES": "UserProvidedCacheLocator"}  # fmt: skip
    code = "import attnbench.kernels.stream, attnbench.kernels.patchmatch.cpu"
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "NUMBA_CACHE_DIR" in done.stderr and "Traceback" not in done.stderr


# --- profile --trace: a missing parent folder, as every other output ---

PROFILE = ["profile", "--seq", "16", "--backends", "softmax", "--heads", "1", "--dim", "4",
           "--csv", "p.csv"]  # fmt: skip


@pytest.mark.parametrize("trace", ["nodir/x", "nodir/deeper/x", "afile", "afile/x"])
def test_profile_trace_needs_an_existing_parent(workdir, trace):
    (workdir / "afile").write_text("")
    refused([*PROFILE, "--trace", trace], workdir, "--trace")


def test_profile_trace_may_be_a_new_folder_in_an_existing_one(workdir):
    from attnbench.api.time import _trace_dir

    assert _trace_dir(workdir / "traces") == workdir / "traces"
    assert not (workdir / "traces").exists()  # the study makes it with its first trace
