"""The error study's references and metrics computed a block of query rows at a time equal
the dense computation, and what cannot fit in memory is skipped, not run."""

import pytest
import torch

from attnbench import get_backend
from attnbench.backends import rowblocks
from attnbench.backends.registry import Backend
from attnbench.backends.rowblocks import by_rows, row_blocks
from attnbench.backends.softmax import softmax_weights
from attnbench.backends.sparse import SparseStrided
from attnbench.inputs import Inputs, grid_qkv
from attnbench.kernels.patchmatch import reference
from attnbench.measure.metrics import argmax_hit_rate, map_metrics, recall_at_k
from attnbench.run import runner, worker
from attnbench.studies import error
from attnbench.studies.error import ErrorStudy
from attnbench.studies.exact import exact_softmax

GRID = (7, 9)  # odd, non-square: blocks end mid-row of the image
N = GRID[0] * GRID[1]


def qkv(heads=2, n=N, d=4, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(1, heads, n, d, generator=gen) for _ in range(3)]


@pytest.fixture
def tiny_blocks(monkeypatch):
    """Blocks of a few rows (the last one shorter), as a large n would get."""
    monkeypatch.setattr(rowblocks, "BLOCK_BYTES", 8 * N * 2 * 5)  # 5 rows of 2 heads


@pytest.mark.parametrize(
    "n_rows, n_keys, planes, budget", [(10, 4, 1, 96), (7, 100, 3, 1), (5, 2, 1, 10**9)]
)
def test_row_blocks_cover_every_row_once_within_the_budget(n_rows, n_keys, planes, budget):
    blocks = row_blocks(n_rows, n_keys, planes, budget)
    assert [i for b in blocks for i in range(b.start, b.stop)] == list(range(n_rows))
    longest = max(b.stop - b.start for b in blocks)
    assert longest == 1 or 8 * planes * n_keys * longest <= budget


def test_exact_softmax_in_blocks_equals_the_dense_formula(tiny_blocks):
    q, k, v = qkv()
    dense = softmax_weights(q.double(), k.double()) @ v.double()
    assert len(row_blocks(N, N, 2)) > 2
    torch.testing.assert_close(exact_softmax(q, k, v), dense, rtol=0, atol=1e-12)


def test_yoso_e_in_blocks_equals_its_dense_output(tiny_blocks):
    q, k, v = qkv()
    yoso_e = get_backend("yoso-e")
    torch.testing.assert_close(by_rows(yoso_e, q, k, v), yoso_e(q, k, v), rtol=0, atol=1e-6)


BACKENDS = [
    "softmax", "sdpa", "yoso-e", "yoso:m=16", "scram:kappa=2,b=1", "scram:kappa=3,variant=mode,L=2",
    "scram-snis:samples=16", "scram-mh:samples=16", "sparse-strided", "sparse-fixed",
]  # fmt: skip


@pytest.mark.parametrize("spec", BACKENDS)
def test_map_blocks_join_into_the_dense_map(spec):
    q, k, _ = qkv()
    backend = get_backend(spec)
    blocks = row_blocks(N, N, 2, budget=8 * N * 2 * 4)
    got = list(backend.map_blocks(q, k, blocks, GRID))
    if backend.map_in_blocks:
        assert [rows for rows, _ in got] == blocks
    else:
        assert [rows for rows, _ in got] == [slice(0, N)]
    joined = torch.cat([weights for _, weights in got], dim=-2)
    torch.testing.assert_close(joined, backend.map_of(q, k, grid=GRID), rtol=0, atol=1e-6)


@pytest.mark.parametrize("spec", ["scram:kappa=2,b=1", "sparse-strided", "yoso:m=16"])
def test_map_metrics_in_blocks_equal_the_dense_ones(spec, tiny_blocks):
    q, k, _ = qkv()
    backend = get_backend(spec)
    dense = map_metrics(softmax_weights(q.double(), k.double()), backend.map_of(q, k, grid=GRID))
    blocked = error._map_metrics(backend, q, k, GRID)
    assert blocked.keys() == dense.keys()
    for metric, value in dense.items():
        assert blocked[metric] == pytest.approx(value, abs=1e-12), metric


@pytest.mark.parametrize("spec", ["scram:kappa=3,b=1", "scram:kappa=3,variant=mode,L=2"])
def test_search_metrics_in_blocks_equal_brute_force(spec, tiny_blocks):
    q, k, _ = grid_qkv("blobs", *GRID, d=3)
    backend = get_backend(f"{spec},T=1")  # one iteration: some misses, so the rates are < 1
    found, scores = backend.matches(q, k, GRID)
    qf, kf = q[:, 0], k[:, 0]
    if "mode" in spec:
        truth, _ = reference.topk_mode(qf, kf, *GRID, 3, 2)
    else:
        truth, _ = reference.topk_max(qf, kf, 3)
    dense = {
        "argmax_hit_rate": argmax_hit_rate(scores[..., 0], reference.scores(qf, kf).amax(-1)),
        "recall_at_kappa": recall_at_k(found.long(), truth),
    }
    assert backend.diagnostics(q, k, None, GRID) == dense


class WholeMapStrided(SparseStrided):
    """The strided pattern giving its map only whole, as a backend without row blocks does."""

    name = "whole-map-strided"
    map_in_blocks = False
    map_blocks = Backend.map_blocks


def run_rows(free_bytes, monkeypatch, backends):
    monkeypatch.setattr(error, "available_bytes", lambda device: free_bytes)
    monkeypatch.setattr(worker, "available_bytes", lambda device: free_bytes)
    spec = ErrorStudy(
        seqs=[], grids=[GRID], hashes=[8], trials=2, mc_seeds=1,
        inputs=Inputs("blobs", 1, 1, 3), backends=backends,
    )  # fmt: skip
    return [row for batch in runner.run(spec) for row in batch]


def test_what_cannot_fit_is_skipped_with_its_reason(monkeypatch):
    softmax, strided, scram = (get_backend(b) for b in ("softmax", "sparse-strided", "scram"))
    whole = WholeMapStrided()
    forward = {b.spec: b.predicted_bytes(1, 1, N, 3, 4) for b in (softmax, strided, scram)}
    dense_map = error.DENSE_MAP_BYTES * N * N
    # room for every forward but softmax's, and for no dense map
    free = int(max(forward[strided.spec], forward[scram.spec]) / error.HEADROOM) + 1
    assert forward[softmax.spec] > error.HEADROOM * free and dense_map > error.HEADROOM * free
    rows = run_rows(free, monkeypatch, [softmax, whole, strided, scram])
    by_backend = {}
    for r in rows:
        by_backend.setdefault(r.backend, {})[r.metric] = r

    (skip,) = by_backend["softmax"].values()  # nothing of softmax ran
    assert skip.status == "skipped" and skip.value is None and skip.reason.startswith("needs ~")
    # the whole-map backend ran, but its map was skipped
    assert by_backend[whole.spec]["rel_frobenius_vs_softmax"].status == "ok"
    skip = by_backend[whole.spec]["captured_mass_vs_softmax"]
    assert skip.status == "skipped" and skip.reason.startswith("attention map needs ~")
    assert "tv_vs_softmax" not in by_backend[whole.spec]
    # the maps of strided and scram come in blocks: all of their metrics were computed
    for backend in (strided, scram):
        assert all(r.status == "ok" and r.count == 2 for r in by_backend[backend.spec].values())
        assert "tv_vs_softmax" in by_backend[backend.spec]
