"""Stages and cost models of the exact and baseline backends: softmax, sdpa, linformer,
longformer, nystromformer, performer, reformer, sparse-strided, sparse-fixed."""

import json
import math

import pytest
import torch
from torch.profiler import ProfilerActivity, profile
from torch.utils.flop_counter import FlopCounterMode

from attnbench import get_backend
from attnbench.backends.cost import Shape, total
from attnbench.backends.longformer import longformer_pattern
from attnbench.backends.sparse import fixed_pattern, strided_pattern

SPECS = [
    "softmax",
    "sdpa",
    "linformer:k=5",
    "linformer:k=4,share=kv",
    "linformer:k=3,share=none",
    "longformer:window=4",
    "longformer:window=6,global=2",
    "nystromformer:landmarks=4,conv=5",
    "nystromformer:landmarks=3,conv=0,iterations=2",
    "performer:features=7",
    "reformer:bucket=4,hashes=2",
    "sparse-strided:l=3",
    "sparse-strided",
    "sparse-fixed:l=4,c=2",
    "sparse-fixed",
]
SHAPES = [(1, 2, 10, 4), (2, 1, 17, 8), (1, 1, 33, 5)]
MODES = ("fwd", "bwd", "fwdbwd")


def qkv(batch, heads, n, d, dtype=torch.float64, grad=False):
    gen = torch.Generator().manual_seed(n * 31 + d)
    return [
        torch.randn(batch, heads, n, d, generator=gen, dtype=dtype).requires_grad_(grad)
        for _ in range(3)
    ]


@pytest.mark.parametrize("spec", SPECS)
@pytest.mark.parametrize("mode", MODES)
def test_cost_names_the_stages_a_call_runs(spec, mode):
    backend = get_backend(spec)
    for batch, heads, n, d in SHAPES:
        for dim_v in (None, 3):
            costs = backend.cost(Shape(batch, heads, n, d, dim_v=dim_v, mode=mode))
            assert set(costs) == set(backend.stages_in(mode))
            for cost in costs.values():
                for count in (cost.matmul_flops, cost.other_flops, cost.bytes, cost.footprint):
                    assert math.isfinite(count) and count >= 0
            if mode != "bwd":
                assert sum(costs[s].flops for s in backend.stages_in("fwd")) > 0
            if mode != "fwd":
                assert costs["backward"].flops > 0


def test_parameter_dependent_stages():
    """conv=0 runs no convolution and global=0 no global stages: they are not named."""
    assert "conv" not in get_backend("nystromformer:conv=0").stages_in("fwd")
    assert "conv" in get_backend("nystromformer:conv=3").stages_in("fwdbwd")
    plain = get_backend("longformer:window=4").stages_in("fwd")
    assert plain == ("band", "softmax", "weighted_sum")
    assert get_backend("longformer:window=4,global=1").stages_in("fwd") == (
        "band",
        "global_keys",
        "softmax",
        "weighted_sum",
        "global_rows",
    )


@pytest.mark.parametrize(
    "spec",
    [
        "softmax",
        "linformer:k=5",
        "linformer:k=4,share=kv",
        "linformer:k=3,share=none",
        "nystromformer:landmarks=4,conv=5",
        "nystromformer:landmarks=3,conv=0,iterations=2",
        "nystromformer:landmarks=64,conv=33",
        "performer:features=7",
        "performer:features=3",
        "reformer:bucket=4,hashes=2",
        "reformer:bucket=3,hashes=1",
    ],
)
def test_matmul_flops_equal_the_flop_counter(spec):
    """The stages' matmul_flops sum to FlopCounterMode's total exactly, forward and
    backward (all of q, k, v requiring gradients). FlopCounterMode counts products and
    convolutions only; beyond them the model adds other_flops (scalings, softmaxes,
    reductions, exp, sorting, per its docstrings) and bytes, which no counter checks.
    Nyströmformer's convolution is counted at every tap, as the counter does."""
    backend = get_backend(spec)
    for batch, heads, n, d in SHAPES:
        q, k, v = qkv(batch, heads, n, d, grad=True)
        with FlopCounterMode(display=False) as counter:
            out = backend(q, k, v)
        forward = total(backend.cost(Shape(batch, heads, n, d, mode="fwd")).values())
        assert counter.get_total_flops() == forward.matmul_flops
        with FlopCounterMode(display=False) as counter:
            out.backward(torch.ones_like(out))
        both = backend.cost(Shape(batch, heads, n, d, mode="fwdbwd"))
        assert counter.get_total_flops() == both["backward"].matmul_flops
        assert (
            total(both.values()).matmul_flops
            == forward.matmul_flops + both["backward"].matmul_flops
        )


@pytest.mark.parametrize("spec", ["softmax", "sdpa"])
def test_exact_attention_counts_four_b_h_n2_d(spec):
    """Softmax and sdpa state their own algorithmic work: Q K^T and P V, 4 B H n^2 d
    forward; the dense-equivalent scale is `cost.dense_equivalent`, not a stage of theirs."""
    backend = get_backend(spec)
    for batch, heads, n, d in SHAPES:
        costs = backend.cost(Shape(batch, heads, n, d))
        assert set(costs) == set(backend.stages)
        assert total(costs.values()).matmul_flops == 4 * batch * heads * n * n * d
    sdpa = get_backend("sdpa").cost(Shape(2, 3, 16, 8, mode="bwd"))["backward"]
    assert sdpa.matmul_flops == 2.5 * 4 * 2 * 3 * 16 * 16 * 8  # the fused backward's five


@pytest.mark.parametrize("window, n_global", [(1, 0), (2, 0), (5, 0), (8, 3), (40, 2), (3, 50)])
def test_longformer_counts_the_pattern_exactly(window, n_global):
    backend = get_backend(f"longformer:window={window},global={n_global}")
    for n in (1, 2, 7, 16, 33):
        band, far, rows = backend.pairs(n)
        pattern = longformer_pattern(n, window, n_global)
        assert band + far + rows == int(pattern.sum())
        g = min(n_global, n)
        i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
        assert band == int((((i - j).abs() <= window // 2) & (i >= g)).sum())
        costs = backend.cost(Shape(2, 3, n, 4))
        scored = sum(costs[s].matmul_flops for s in ("band", "global_keys") if s in costs)
        assert scored == 2 * 4 * 6 * (band + far)


@pytest.mark.parametrize("l", [1, 2, 3, 5, 16])
def test_sparse_counts_the_patterns_exactly(l):  # noqa: E741
    for n in (1, 2, 9, 16, 31):
        strided = get_backend(f"sparse-strided:l={l}")
        assert sum(strided.pairs(n)) == int(strided_pattern(n, l).sum())
        costs = strided.cost(Shape(1, 2, n, 4))
        assert costs["band"].matmul_flops + costs["stride"].matmul_flops == 2 * 4 * 2 * sum(
            strided.pairs(n)
        )
        for c in sorted({1, min(2, l), l}):
            fixed = get_backend(f"sparse-fixed:l={l},c={c}")
            assert sum(fixed.pairs(n)) == int(fixed_pattern(n, l, c).sum())
            i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
            assert fixed.pairs(n)[0] == int((i // l == j // l).sum())


def test_sparse_stride_follows_the_grid():
    backend = get_backend("sparse-strided")
    grid = backend.cost(Shape(1, 1, 24, 4, grid=(4, 6)))
    assert grid["stride"].matmul_flops == 2 * 4 * backend.pairs(24, (4, 6))[1]
    assert backend.pairs(24, (4, 6)) != backend.pairs(24)  # l = W = 6, not round(sqrt(24))


def traced_stages(backend, tmp_path, mode: str, shape=(1, 2, 12, 4)) -> set[str]:
    q, k, v = qkv(*shape, dtype=torch.float32, grad=mode != "fwd")
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        out = backend(q, k, v)
        if mode == "fwdbwd":
            with backend.stage("backward"):
                out.backward(torch.ones_like(out))
    path = tmp_path / f"{mode}.json"
    prof.export_chrome_trace(str(path))
    events = json.loads(path.read_text())["traceEvents"]
    prefix = f"{backend.name}."
    return {e["name"] for e in events if str(e.get("name", "")).startswith(prefix)}


@pytest.mark.parametrize("spec", SPECS)
def test_trace_shows_exactly_the_costed_stages(spec, tmp_path):
    backend = get_backend(spec)
    for mode in ("fwd", "fwdbwd"):
        costs = backend.cost(Shape(1, 2, 12, 4, mode=mode))
        expected = {f"{backend.name}.{s}" for s in costs}
        assert traced_stages(backend, tmp_path, mode) == expected
