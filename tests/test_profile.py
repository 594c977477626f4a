"""The profile study and command: stage rows that add up to the call, throughput against
the machine's ceilings, traces that name the backend's stages, and clean refusals."""

import contextlib
import json
import math
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
import torch
from typer.testing import CliRunner

from attnbench.backends import backend_classes, get_backend
from attnbench.backends.cost import DENSE_FACTOR, Cost, Shape, dense_equivalent
from attnbench.case import MODES
from attnbench.cli import core
from attnbench.measure import stageclock
from attnbench.measure.ceilings import Ceilings, Level
from attnbench.measure.profiling import device_stage_ms
from attnbench.measure.roofline import bound_of, call_throughput, throughput
from attnbench.measure.stageclock import clocked
from attnbench.run.runner import run
from attnbench.studies.profile import OTHER, ProfileStudy

SMALL = ["--heads", "1", "--dim", "16", "--repeats", "2", "--warmup", "1", "--min-time", "0"]


def ceilings(peak=100.0, adds=None) -> Ceilings:
    levels = [
        Level("L1", 64e3, 32e3, 200.0, 250.0),
        Level("L2", 2e6, 1e6, 100.0, 90.0),
        Level("DRAM", math.inf, 1e9, 20.0, 25.0),
    ]
    add_gflops = {} if adds is None else {"float32": adds}
    return Ceilings(
        "cpu", "test cpu", 2, "f", "now", {"float32": peak}, levels, add_gflops=add_gflops
    )


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("b,h,n,d", [(1, 1, 16, 8), (2, 4, 4096, 64), (3, 2, 1000, 3)])
def test_dense_equivalent_is_flash_attentions_count(mode, b, h, n, d):
    shape = Shape(batch=b, heads=h, n=n, dim=d, mode=mode)
    assert (
        dense_equivalent(shape)
        == 4 * b * h * n * n * d * {"fwd": 1, "bwd": 2.5, "fwdbwd": 3.5}[mode]
    )
    assert DENSE_FACTOR[mode] == {"fwd": 1.0, "bwd": 2.5, "fwdbwd": 3.5}[mode]


@pytest.mark.parametrize("name", sorted(backend_classes()))
def test_every_backend_states_the_cost_of_each_of_its_stages(name):
    """A cost model covers exactly the stages a call runs (on the CPU), none negative."""
    backend = get_backend(name)
    assert backend.stages, f"{name} marks no stages"
    for mode in MODES if backend.backward else ("fwd",):
        shape = Shape(batch=1, heads=2, n=256, dim=16, mode=mode, grid=(16, 16))
        costs = backend.cost(shape)
        assert set(costs) == set(backend.stages_in(mode, shape.device)), (name, mode)
        for stage, cost in costs.items():
            assert min(cost.matmul_flops, cost.other_flops, cost.bytes) >= 0, (name, stage)
        assert sum(c.flops for c in costs.values()) > 0


def test_a_whole_call_is_set_against_its_stages_each_at_its_own_bound():
    """A call of a compute-bound stage and an L2-resident one is set against the time each
    would take at its own bound (flops over the peak, flops over intensity x L2 bandwidth),
    although its summed bytes would sit under DRAM's roof."""
    stages = [(1e9, 1e6, 1e4, 0.0), (1e6, 1e8, 1e6, 0.0)]
    fields = call_throughput(22.0, stages, None, ceilings(peak=100.0), "float32")
    assert fields["bound_pct"] == pytest.approx(50.0)
    assert fields["bound"] == "compute"
    assert fields["gflops_alg"] == pytest.approx((1e9 + 1e6) / 0.022 / 1e9)


def test_flops_without_multiplies_are_set_against_the_add_peak():
    """Adds cannot fuse into FMAs, so a stage of adds alone is bound by the measured add
    rate, not the GEMM peak that counts each FMA twice; a mix runs each kind at its own
    ceiling (1e9 fused flops at 100 GFLOP/s take 10 ms, 5e8 adds at 50 G/s take 10 ms more:
    1.5e9 flops in 20 ms); without a measured add peak nothing changes."""
    c = ceilings(peak=100.0, adds=50.0)
    assert bound_of(1e9, 1e3, 1e4, c, "float32", other_flops=1e9) == ("adds", 50.0)
    name, rate = bound_of(1.5e9, 1e3, 1e4, c, "float32", other_flops=5e8)
    assert name == "compute" and rate == pytest.approx(75.0)
    assert bound_of(1e9, 1e3, 1e4, c, "float32", other_flops=0.0) == ("compute", 100.0)
    assert bound_of(1e9, 1e3, 1e4, ceilings(peak=100.0), "float32", 1e9) == ("compute", 100.0)
    assert bound_of(1e9, 1e3, 1e4, c, "float64", other_flops=1e9) == ("compute", 100.0)
    # memory-bound work keeps its memory roof: 1 FLOP/B from DRAM
    assert bound_of(1e6, 1e6, 1e8, c, "float32", other_flops=1e6) == ("DRAM", 25.0)
    fields = throughput(40.0, 1e9, 1e3, 1e4, None, c, "float32", other_flops=1e9)
    assert fields["bound"] == "adds" and fields["bound_pct"] == pytest.approx(50.0)
    whole = call_throughput(40.0, [(1e9, 1e3, 1e4, 1e9)], None, c, "float32")
    assert whole["bound"] == "adds" and whole["bound_pct"] == pytest.approx(50.0)


def test_a_stage_of_several_pieces_sets_each_against_its_own_bound():
    """A stage summed from a streaming product (from DRAM) and a cumulation whose tables sit
    in L2 is set against 0.4 ms + 1 ms at the two bounds; one bound for the sum, at the
    larger footprint's level, would put 1.1e8 bytes under DRAM's roof and claim more than
    the machine can do."""
    stage = Cost(matmul_flops=1e6, bytes=1e7) + Cost(other_flops=1e6, bytes=1e8, working_set=1e5)
    assert len(stage.pieces()) == 2 and stage.footprint == 1e7
    assert (stage * 2).pieces()[1].bytes == 2e8
    fields = call_throughput(2.0, stage.roofline_parts(), None, ceilings(), "float32")
    assert fields["bound_pct"] == pytest.approx(70.0) and fields["bound"] == "L2"
    one = throughput(2.0, stage.flops, stage.bytes, stage.footprint, None, ceilings(), "float32")
    assert one["bound_pct"] > 100
    dq = get_backend("yoso-32").cost(Shape(1, 4, 16384, 64, mode="fwdbwd"))["backward_dq"]
    signs, scaled = dq.pieces()  # backward=proj: sign projections, then a scaled cumulation
    assert signs.matmul_flops > 0 and scaled.matmul_flops == 0
    assert signs.footprint > scaled.footprint


def test_a_stage_marks_a_range_only_while_a_profiler_records():
    backend = get_backend("softmax")
    assert isinstance(backend.stage("scores"), contextlib.nullcontext)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]):
        assert isinstance(backend.stage("scores"), torch.profiler.record_function)


def test_roofline_bound_is_compute_or_the_level_the_working_set_fits():
    c = ceilings(peak=100.0)
    assert bound_of(1e9, 1e6, 1e4, c, "float32") == ("compute", 100.0)  # 1000 FLOP/B
    name, rate = bound_of(1e6, 1e6, 1e4, c, "float32")  # L1's memory roof is above the peak
    assert (name, rate) == ("compute", 100.0)
    assert bound_of(1e6, 1e6, 1e8, c, "float32") == ("DRAM", 25.0)  # 1 FLOP/B from DRAM
    assert bound_of(0, 1e6, 1e5, c, "float32") == ("L2", 100.0)  # no flops: bandwidth alone
    fields = throughput(2.0, 1e6, 1e6, 1e8, 4e6, c, "float32")
    assert fields["gflops_alg"] == pytest.approx(0.5)
    assert fields["gflops_dense"] == pytest.approx(2.0)
    assert fields["intensity_alg"] == 1.0
    assert fields["bound"] == "DRAM"
    assert fields["bound_pct"] == pytest.approx(100 * 0.5 / 25.0)


def test_stage_clock_counts_a_nested_stage_once():
    """A span's self time excludes the spans nested in it; unrelated names are not kept."""
    a = torch.randn(200, 200)

    def call():
        with stageclock.running().span("x.outer"):
            a @ a
            with stageclock.running().span("x.inner"):
                a @ a
                a @ a

    spent, wall = clocked(call, "x.")
    assert set(spent) == {"outer", "inner"}
    assert 0 < spent["outer"] and 0 < spent["inner"]
    assert spent["outer"] + spent["inner"] <= wall
    assert stageclock.running() is None


def test_a_backend_stage_reports_to_the_running_clock():
    backend = get_backend("softmax")
    q, k, v = (torch.randn(1, 1, 32, 8) for _ in range(3))
    spent, _ = clocked(lambda: backend(q, k, v), "softmax.")
    assert set(spent) == set(backend.stages)


def fake_event(name, start, end, device_us=0.0):
    """What `device_stage_ms` reads of a profiler event."""
    span = SimpleNamespace(start=start, end=end)
    return SimpleNamespace(name=name, time_range=span, self_device_time_total=device_us)


def test_gpu_kernels_go_to_the_innermost_stage_around_their_launch_on_any_thread():
    """A CUDA backward runs on autograd's own thread: its ops lie inside the "backward"
    range in time only, and a stage range on that thread is the innermost around its own."""
    events = [
        fake_event("y.hash", 0, 10),
        fake_event("aten::mm", 1, 2, device_us=300.0),
        fake_event("y.cumulation", 10, 20, device_us=500.0),  # a numba launch in the range
        fake_event("y.backward", 30, 100),
        fake_event("aten::div", 35, 36, device_us=100.0),  # another thread, same interval
        fake_event("y.backward_dv", 40, 60),
        fake_event("aten::add", 41, 42, device_us=200.0),
        fake_event("aten::mul", 200, 201, device_us=50.0),  # outside every stage
    ]
    spent = device_stage_ms(events, "y.")
    assert spent == {"hash": 0.3, "cumulation": 0.5, "backward": 0.1, "backward_dv": 0.2}


def profile_rows(mode="fwd", **extra):
    spec = ProfileStudy(
        seqs=[64], backends=[get_backend("softmax"), get_backend("yoso-4")], heads=1, dim=16,
        repeats=2, warmup=1, min_time=0, calls=2, mode=mode, ceilings=ceilings(), **extra,
    )  # fmt: skip
    return [r for rows in run(spec) for r in rows]


@pytest.mark.parametrize("mode", ["fwd", "fwdbwd"])
def test_profile_rows_split_each_call_into_its_stages(mode):
    rows = profile_rows(mode)
    for backend in ("softmax", "yoso"):
        mine = [r for r in rows if r.backend.split(":")[0] == backend]
        assert all(r.study == "profile" and r.status == "ok" for r in mine)
        whole = next(r for r in mine if r.metric == "time_ms")
        unmarked = next(r for r in mine if r.metric == "unmarked_ms")
        assert len(unmarked.samples) == 2 and unmarked.value > 0 and unmarked.stage == ""
        assert whole.stage == "" and whole.gflops_dense > 0 and whole.bound
        stages = {r.stage: r for r in mine if r.metric == "stage_ms"}
        declared = get_backend(backend).stages_in(mode)
        assert set(stages) == {*declared, OTHER}
        # each profiled call splits into its stages and "other", which the stage clock
        # keeps non-negative (self times of the spans within the call)
        assert all(ms >= 0 for r in stages.values() for ms in r.samples)
        walls = [sum(r.samples[i] for r in stages.values()) for i in range(2)]
        for r in stages.values():  # shares of the same calls' median time
            assert r.share == pytest.approx(r.value / np.median(walls))
        for stage in declared:
            row = stages[stage]
            assert len(row.samples) == 2 and row.value >= 0
            assert row.gflops_dense is None  # dense-equivalent is a whole-call count


def test_stage_filter_keeps_the_named_stages_and_rejects_one_naming_none():
    rows = profile_rows(stage_filter=["hash", "cum*"])
    assert {r.stage for r in rows if r.metric == "stage_ms"} == {"hash", "cumulation"}
    spec = ProfileStudy(seqs=[64], backends=[get_backend("softmax")], stage_filter=["nope"])
    with pytest.raises(Exception, match="names no stage"):
        list(run(spec))


def test_trace_is_json_naming_the_backends_stages(tmp_path):
    profile_rows(mode="fwdbwd", trace_dir=tmp_path / "traces")
    files = sorted((tmp_path / "traces").iterdir())
    assert len(files) == 2
    for path in files:
        name = "softmax" if path.name.startswith("softmax") else "yoso"
        events = json.loads(path.read_text())["traceEvents"]
        names = {e["name"] for e in events if e.get("name", "").startswith(name + ".")}
        shape = Shape(batch=1, heads=1, n=64, dim=16, mode="fwdbwd")
        assert names == {f"{name}.{s}" for s in get_backend(name).cost(shape)}


def invoke(args):
    return CliRunner().invoke(core.app, args)


def test_profile_command_writes_rows_ceilings_roofline_and_traces(tmp_path):
    csv, png, traces = tmp_path / "p.csv", tmp_path / "roofline.png", tmp_path / "t"
    args = ["profile", "--seq", "128", "--backends", "sdpa,yoso-8", *SMALL, "--calls", "2"]
    result = invoke([*args, "--csv", str(csv), "--plot", str(png), "--trace", str(traces)])
    assert result.exit_code == 0, result.output
    frame = pd.read_csv(csv)
    assert set(frame["study"]) == {"profile"}
    stages = frame[frame["metric"] == "stage_ms"]
    assert {"hash", "cumulation", OTHER} <= set(stages["stage"])
    whole = frame[frame["metric"] == "time_ms"]
    assert (whole["gflops_dense"] > 0).all() and (whole["bound_pct"] > 0).all()
    env = json.loads(csv.with_suffix(".env.json").read_text())
    assert env["ceilings"]["levels"] and env["ceilings"]["gemm_gflops"]["float32"] > 0
    assert png.stat().st_size > 0
    assert len(list(traces.glob("*.json"))) == 2
    again = tmp_path / "again.png"
    assert invoke(["plot", str(csv), "-o", str(again)]).exit_code == 0 and again.is_file()


def test_time_rows_carry_throughput_columns(tmp_path):
    csv = tmp_path / "t.csv"
    args = ["time", "--seq", "64", "--backends", "softmax,yoso-4", *SMALL, "--csv", str(csv)]
    result = invoke(args)
    assert result.exit_code == 0, result.output
    times = pd.read_csv(csv).query("metric == 'time_ms'")
    shape = Shape(batch=1, heads=1, n=64, dim=16)
    expected = dense_equivalent(shape) / (times["value"] / 1e3) / 1e9
    assert times["gflops_dense"].to_numpy() == pytest.approx(expected.to_numpy())
    assert (times["gflops_alg"] > 0).all() and times["bound"].notna().all()
    assert "GFLOP/s" in result.output


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--backends", "nope"], "unknown backend"),
        (["--trace", "/proc/attnbench-traces"], "--trace"),
        (["--stages", "nothing*"], "names no stage"),
        (["--stages", "hash,"], "--stages"),
        (["--nvtx", "--device", "cpu"], "--nvtx"),
    ],
)
def test_bad_profile_input_is_one_line_exit_2_and_writes_nothing(tmp_path, args, needle):
    csv = tmp_path / "p.csv"
    base = ["profile", "--seq", "64", "--backends", "yoso-4", *SMALL, "--csv", str(csv)]
    result = invoke([*base, *args])
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and needle in lines[0]
    assert not list(tmp_path.iterdir())
