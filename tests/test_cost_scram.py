"""The SCRAM family's stages and cost models: each call marks exactly the stages its cost
model names (PatchMatch's passes on the CPU, its one launch on CUDA), the counts are what
the kernels do (the neighbours, windows and search radii they visit), and they scale with
the sizes as the algorithm does."""

import json
import math
from dataclasses import replace

import pytest
import torch
from torch.profiler import ProfilerActivity, profile
from torch.utils.flop_counter import FlopCounterMode

import attnbench.backends.scram_mc  # noqa: F401 - registers scram-snis and scram-mh
from attnbench import get_backend
from attnbench.backends import scram
from attnbench.backends.cost import Shape, total
from attnbench.kernels.patchmatch import cpu

SPECS = ["scram", "scram:variant=mode,L=2,b=2", "scram-snis", "scram-mh"]
SHAPES = [
    Shape(batch=1, heads=2, n=64, dim=4, grid=(8, 8)),
    Shape(batch=2, heads=1, n=40, dim=3, dim_v=5, grid=(1, 40)),
    Shape(batch=1, heads=3, n=60, dim=16, itemsize=8, grid=(6, 10)),
]
CPU_PATCHMATCH = {"init", "propagation", "random_search"}
AFTER = {"scram": {"window_softmax"}, "scram-snis": {"proposal", "weights", "estimate"}}
AFTER["scram-mh"] = {"chains", "estimate"}


@pytest.mark.parametrize("spec", SPECS)
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_cost_names_the_stages_of_the_device(spec, shape, device):
    """The stage set depends on the device: PatchMatch's passes on the CPU, its one
    `patchmatch` launch on CUDA; `stages` lists both, `stages_in` those of the device.
    None of the family has a backward."""
    backend = get_backend(spec)
    assert not backend.backward
    costs = backend.cost(replace(shape, device=device))
    search = CPU_PATCHMATCH if device == "cpu" else {"patchmatch"}
    assert set(costs) == search | AFTER[backend.name]
    assert set(backend.stages_in("fwd", device)) == set(costs)
    assert set(backend.stages) == CPU_PATCHMATCH | {"patchmatch"} | AFTER[backend.name]
    for cost in costs.values():
        counts = (cost.matmul_flops, cost.other_flops, cost.bytes, cost.footprint)
        assert all(math.isfinite(c) and c >= 0 for c in counts)
        assert cost.flops > 0 and cost.bytes > 0
    assert total(costs.values()).flops > 0


@pytest.mark.parametrize("spec", SPECS)
def test_cuda_patchmatch_is_the_sum_of_the_cpu_passes(spec):
    backend = get_backend(spec)
    shape = SHAPES[0]
    on_cpu = backend.cost(shape)
    on_cuda = backend.cost(replace(shape, device="cuda"))
    passes = total(on_cpu[s] for s in sorted(CPU_PATCHMATCH))
    assert on_cuda["patchmatch"] == passes
    assert {s: on_cuda[s] for s in AFTER[backend.name]} == {
        s: on_cpu[s] for s in AFTER[backend.name]
    }


@pytest.mark.parametrize("grid", [(3, 3), (5, 7), (1, 9), (8, 8)])
@pytest.mark.parametrize("jump", [1, 2, 4, 8])
def test_neighbours_inside_counts_what_propagation_visits(grid, jump):
    height, width = grid
    inside = sum(
        0 <= y + dy < height and 0 <= x + dx < width
        for y in range(height)
        for x in range(width)
        for dy, dx in ((-jump, 0), (jump, 0), (0, -jump), (0, jump))
    )
    assert scram.neighbours_inside(height, width, jump) == inside


@pytest.mark.parametrize("grid", [(3, 3), (5, 7), (1, 9), (16, 11)])
@pytest.mark.parametrize("b", [0, 1, 3, 12])
def test_mean_window_is_the_clipped_window_averaged_over_centres(grid, b):
    """One match at every pixel in turn: the keys of its clipped window, averaged."""
    height, width = grid
    n = height * width
    centres = torch.arange(n, dtype=torch.int32).view(1, n, 1)
    keys = scram.candidate_mask(centres, height, width, b).sum()
    assert scram.mean_window(height, width, b) == pytest.approx(float(keys) / n, rel=1e-12)


@pytest.mark.parametrize("grid", [(1, 1), (1, 9), (8, 8), (17, 5), (64, 128)])
def test_search_levels_are_the_kernels(grid):
    assert scram.search_levels(*grid) == cpu._search_levels(*grid)


def _flops(backend, shape, stage):
    return backend.cost(shape)[stage].flops


@pytest.mark.parametrize("spec", SPECS)
def test_counts_are_per_plane(spec):
    """Twice the planes (batch or heads): every stage's work doubles, its working set
    (one plane's) does not."""
    backend = get_backend(spec)
    one = backend.cost(Shape(1, 2, 256, 8, grid=(16, 16)))
    for two in (Shape(2, 2, 256, 8, grid=(16, 16)), Shape(1, 4, 256, 8, grid=(16, 16))):
        for stage, cost in backend.cost(two).items():
            assert cost.flops == 2 * one[stage].flops
            assert cost.bytes == 2 * one[stage].bytes
            assert cost.footprint == one[stage].footprint or cost.working_set is None


def test_scram_flops_scale_with_n_and_t():
    """Twice the tokens: twice the init and (away from the grid's ends) the propagation and
    window work, and the random search's by its extra radius; propagation and random search
    are linear in the iterations T, which leave init and the windows alone."""
    backend = get_backend("scram:kappa=4,b=1,T=4")
    short, long = Shape(1, 1, 4096, 8, grid=(1, 4096)), Shape(1, 1, 8192, 8, grid=(1, 8192))
    assert _flops(backend, long, "init") == 2 * _flops(backend, short, "init")
    for stage in ("propagation", "window_softmax"):
        assert _flops(backend, long, stage) / _flops(backend, short, stage) == pytest.approx(
            2, rel=2e-3
        )
    levels = scram.search_levels(1, 8192) / scram.search_levels(1, 4096)
    ratio = _flops(backend, long, "random_search") / _flops(backend, short, "random_search")
    assert ratio == pytest.approx(2 * levels, rel=1e-12)
    shape = Shape(2, 2, 1024, 16, grid=(32, 32))
    few, more = backend.cost(shape), backend.with_values(T=8).cost(shape)
    for stage in ("propagation", "random_search"):
        assert more[stage].flops == 2 * few[stage].flops
    for stage in ("init", "window_softmax"):
        assert more[stage] == few[stage]


def test_window_work_follows_kappa_and_b():
    shape = Shape(1, 1, 4096, 8, grid=(64, 64))

    def window(spec):
        return _flops(get_backend(spec), shape, "window_softmax")

    twice = window("scram:kappa=4,b=1") / window("scram:kappa=2,b=1")
    assert twice == pytest.approx(2, rel=0.01)  # the divisions are per query, not per key
    wider = window("scram:kappa=2,b=2") / window("scram:kappa=2,b=1")
    assert wider == pytest.approx(25 / 9, rel=0.05)  # (2b+1)^2, a little less at the border


@pytest.mark.parametrize("spec", ["scram-snis", "scram-mh"])
def test_monte_carlo_work_is_linear_in_samples(spec):
    backend = get_backend(f"{spec}:samples=16")
    shape = SHAPES[0]
    few, more = backend.cost(shape), backend.with_values(samples=32).cost(shape)
    assert more["estimate"].flops == 2 * few["estimate"].flops
    sampler = AFTER[backend.name] - {"estimate"}
    for stage in sampler:
        assert 1.9 < more[stage].flops / few[stage].flops <= 2.0
    for stage in CPU_PATCHMATCH:
        assert more[stage] == few[stage]


def _inputs(shape):
    g = torch.Generator().manual_seed(0)
    q, k = (torch.randn(shape.batch, shape.heads, shape.n, shape.dim, generator=g) for _ in "qk")
    return q, k, torch.randn(shape.batch, shape.heads, shape.n, shape.dv, generator=g)


@pytest.mark.parametrize("spec", ["scram:kappa=2", "scram-snis:kappa=2", "scram-mh:kappa=2"])
def test_no_torch_matmul(spec):
    """FlopCounterMode counts no matrix product, as `matmul_flops` says: the scores are
    gathered dot products (numba's, or torch's multiply and sum). The model counts them,
    the softmax's exp, max and sum, the weighted sums of V, the list scans and the
    samplers' elementwise work as `other_flops`."""
    backend = get_backend(spec)
    shape = SHAPES[0]
    q, k, v = _inputs(shape)
    with FlopCounterMode(display=False) as counter:
        backend(q, k, v, grid=shape.grid)
    assert counter.get_total_flops() == sum(c.matmul_flops for c in backend.cost(shape).values())


@pytest.mark.parametrize("spec", ["scram:kappa=2", "scram-snis:kappa=2", "scram-mh:kappa=2"])
def test_trace_names_the_cost_models_stages(spec, tmp_path):
    """A forward call on the CPU marks exactly the stages its cost model names."""
    backend = get_backend(spec)
    shape = SHAPES[0]
    q, k, v = _inputs(shape)
    backend(q, k, v, grid=shape.grid)  # compiled before the trace
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        backend(q, k, v, grid=shape.grid)
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    events = json.loads(path.read_text())["traceEvents"]
    names = {e.get("name", "") for e in events}
    marked = {name for name in names if name.startswith(f"{backend.name}.")}
    assert marked == {f"{backend.name}.{s}" for s in backend.cost(shape)}
    assert marked == {f"{backend.name}.{s}" for s in CPU_PATCHMATCH | AFTER[backend.name]}
