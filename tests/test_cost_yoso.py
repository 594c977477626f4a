"""The YOSO family's stages and cost models: a cost for exactly the stages a call runs, the
matrix-product FLOPs of the plain-torch paths equal to what torch's FlopCounterMode counts,
and traces that name those stages."""

import json
import math

import pytest
import torch
from torch.profiler import ProfilerActivity, profile
from torch.utils.flop_counter import FlopCounterMode

from attnbench import get_backend
from attnbench.backends.cost import Shape, total
from attnbench.kernels.lsh.autograd import LSHCumulation

MODES = ("fwd", "bwd", "fwdbwd")
SPECS = [
    "yoso:m=8,tau=4,hash=gaussian",
    "yoso:m=8,tau=4,hash=fast",
    "yoso:m=8,tau=auto,hash=auto,impl=torch",
    "yoso:m=6,tau=5,hash=fast,backward=dense",
    "yoso:m=6,tau=5,hash=fast,backward=lsh",
    "yoso:m=6,tau=5,backward=pairs",
    "yoso:m=6,tau=5,backward=star,bound=3",
    "yoso:m=6,tau=5,hash=gaussian,backward=expected,resample=fixed",
    "yoso-c:m=8,tau=4,conv=5",
    "yoso-c:m=8,tau=4,conv=33,hash=fast,impl=torch,backward=dense",
    "yoso-e:tau=4",
    "yoso-e:tau=auto,backward=exact",
]
SHAPES = [
    dict(batch=1, heads=1, n=16, dim=8),
    dict(batch=2, heads=3, n=100, dim=64, dim_v=32, itemsize=2),
    dict(batch=1, heads=2, n=4096, dim=3, itemsize=8),
]


@pytest.mark.parametrize("spec", SPECS)
@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_costs_cover_exactly_the_stages_of_each_mode(spec, device):
    backend = get_backend(spec)
    for dims in SHAPES:
        for mode in MODES:
            costs = backend.cost(Shape(**dims, mode=mode, device=device))
            assert set(costs) == set(backend.stages_in(mode)), (spec, mode)
            for stage, cost in costs.items():
                counts = (cost.matmul_flops, cost.other_flops, cost.bytes, cost.footprint)
                assert all(math.isfinite(x) and x >= 0 for x in counts), (spec, mode, stage)
                # YOSO-m normalises nothing before hashing: only fp32 casts, if any
                idle = stage == "normalise" and spec.split(":")[0] != "yoso-e"
                assert cost.bytes > 0 or (idle and dims.get("itemsize", 4) == 4), (spec, stage)
            if mode != "bwd":
                yoso_m = spec.split(":")[0] != "yoso-e"
                worked = [s for s in backend.stages if not (yoso_m and s == "normalise")]
                assert all(costs[s].flops > 0 for s in worked), (spec, mode)


def test_backward_stages_follow_the_backward_kind():
    """The linear backwards mark dV, dQ and dK; dense and expected one dense n x n
    backward."""
    assert get_backend("yoso").stages_in("bwd") == (
        "backward",
        "backward_dv",
        "backward_dq",
        "backward_dk",
    )
    for kind in ("dense", "expected"):
        assert get_backend(f"yoso:backward={kind}").stages_in("bwd") == (
            "backward",
            "backward_dense",
        )
    assert get_backend("yoso-c").stages[-1] == "conv"


def test_numba_and_torch_count_the_same_work():
    """One algorithm, one count: the implementations differ only in what stays resident."""
    shape = Shape(batch=2, heads=2, n=256, dim=32, mode="fwdbwd")
    for kind in ("gaussian", "fast"):
        a = get_backend(f"yoso:hash={kind},impl=numba").cost(shape)
        b = get_backend(f"yoso:hash={kind},impl=torch").cost(shape)
        for stage in a:
            assert a[stage].flops == b[stage].flops, (kind, stage)


def leaves(b=2, h=2, n=24, d=8, dv=6, dtype=torch.float32):
    gen = torch.Generator().manual_seed(0)
    shapes = [(b, h, n, d), (b, h, n, d), (b, h, n, dv)]
    return [torch.randn(s, generator=gen, dtype=dtype).requires_grad_(True) for s in shapes]


@pytest.mark.parametrize(
    "spec,mode",
    [
        ("yoso:m=8,tau=3,hash=gaussian,impl=torch", "fwd"),
        ("yoso:m=8,tau=3,hash=fast,impl=torch", "fwd"),
        ("yoso:m=8,tau=3,hash=gaussian,impl=torch", "fwdbwd"),
        ("yoso:m=8,tau=3,hash=gaussian,impl=torch,backward=dense", "fwdbwd"),
        ("yoso:m=8,tau=3,hash=fast,impl=torch,backward=expected", "fwdbwd"),
        ("yoso-c:m=8,tau=3,hash=gaussian,impl=torch,conv=5", "fwd"),
        ("yoso-c:m=8,tau=3,hash=fast,impl=torch,conv=5", "fwdbwd"),
        ("yoso-e:tau=3", "fwd"),
        ("yoso-e:tau=3", "fwdbwd"),
        ("yoso-e:tau=3,backward=exact", "fwdbwd"),
    ],
)
def test_matmul_flops_are_what_torch_counts(spec, mode):
    """FlopCounterMode counts the products: the Gaussian hash's projections (the fast
    hash's Hadamard transforms are butterflies, not products, so it counts none), the
    dense backwards' n x n products, YOSO-C's convolution and YOSO-E's two products and
    their gradients. Beyond these the models add, as other_flops: normalisations, the
    hash's transforms, bit packing and draws, the cumulations' scatter and gather adds
    (and the weighted ones' products), the n x n elementwise passes."""
    q, k, v = leaves()
    backend = get_backend(spec)
    with FlopCounterMode(display=False) as counter:
        out = backend(q, k, v)
        if mode == "fwdbwd":
            out.backward(torch.ones_like(out))
    shape = Shape(batch=2, heads=2, n=24, dim=8, dim_v=6, mode=mode)
    assert counter.get_total_flops() == total(backend.cost(shape).values()).matmul_flops


TRACED = [
    ("yoso:m=8,tau=3,hash=gaussian", "fwd"),
    ("yoso:m=8,tau=3,hash=fast", "fwdbwd"),
    ("yoso:m=8,tau=3,hash=fast,impl=torch", "fwdbwd"),
    ("yoso:m=8,tau=3,backward=dense", "fwdbwd"),
    ("yoso:m=8,tau=3,backward=star", "fwdbwd"),
    ("yoso:m=8,tau=3,backward=lsh", "fwdbwd"),
    ("yoso-c:m=8,tau=3,conv=5", "fwdbwd"),
    ("yoso-e:tau=3", "fwd"),
    ("yoso-e:tau=3", "fwdbwd"),
]


@pytest.mark.parametrize("spec,mode", TRACED)
def test_trace_names_the_stages_of_the_cost_model(spec, mode, tmp_path):
    q, k, v = leaves()
    backend = get_backend(spec)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        out = backend(q, k, v)
        if mode == "fwdbwd":
            with backend.stage("backward"):
                out.backward(torch.ones_like(out))
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    events = json.loads(path.read_text())["traceEvents"]
    prefix = backend.name + "."
    names = {e["name"] for e in events if e.get("name", "").startswith(prefix)}
    shape = Shape(batch=2, heads=2, n=24, dim=8, dim_v=6, mode=mode)
    assert names == {prefix + s for s in backend.cost(shape)}


def test_cumulation_marks_nothing_without_a_marker():
    """The kernels' op knows no backend: without a marker its backward marks no range."""
    from attnbench.kernels.lsh import reference

    gen = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(1, 10, 4, generator=gen).requires_grad_() for _ in range(3))
    codes = [torch.randint(8, (1, 10, 5), generator=gen, dtype=torch.int32) for _ in range(2)]
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        LSHCumulation.apply(q, k, v, *codes, 3, reference, "lsh").sum().backward()
    assert not [e for e in prof.events() if e.name.startswith("backward_")]
    assert q.grad is not None and k.grad is not None and v.grad is not None


def test_lsh_dq_dk_on_the_cpu_kernel_cost_what_it_moves(monkeypatch):
    """backward=lsh with numba on the CPU sorts rows by code and keeps each bucket's table
    in L1 (`kernels.lsh.cpu.weighted_cumulation`), counted by hand at G = 1, n = 8, d = 4,
    d_v = 2, m = 2, tau = 3 on one thread: one unit of width 4, one span, one radix pass.
    Per hash: codes 4 x 2 x 8 = 64; sorts 2 x (8 x 8 + 20 x 8) = 448; the walk over both
    sorted lists 16 x 8 = 128; rows 4 x 8 x (2 x 2 + 3 x 4) = 512: 1152, twice. Once:
    output zeroed and scaled 3 x 4 x 8 x 4 = 384, tau/2 8 x 8 x 4 = 256. Flops: each of
    16 rows (8 write, 8 read) 2 x 4 multiply-adds a hash, 2 hashes: 512; 1/m and tau/2:
    2 x 8 x 4 = 64."""
    from attnbench.kernels.lsh import cpu

    monkeypatch.setattr(cpu.numba, "get_num_threads", lambda: 1)
    backend = get_backend("yoso:m=2,tau=3,impl=numba,backward=lsh")
    shape = Shape(batch=1, heads=1, n=8, dim=4, dim_v=2, mode="bwd", device="cpu")
    costs = backend.cost(shape)
    for stage in ("backward_dq", "backward_dk"):
        cost = costs[stage]
        assert cost.bytes == 2 * 1152 + 384 + 256
        assert (cost.matmul_flops, cost.other_flops) == (512, 64)
        assert cost.working_set == 4 * (8 * (2 * 2 + 2 * 4 + 2 * 2 + 8) + cpu.BUCKET_FLOATS)
    # no 2^tau table passes per weight column: d_v x less table traffic than the tables'
    big = Shape(batch=1, heads=4, n=4096, dim=64, mode="bwd", device="cpu")
    sorted_cost = backend.cost(big)["backward_dq"]
    tables = get_backend("yoso:m=2,tau=3,impl=torch,backward=lsh").cost(big)["backward_dq"]
    assert tables.bytes > 20 * sorted_cost.bytes
