"""The scram backend: exact when its candidates cover every key, finds the argmax on smooth
images, keeps modes L apart, and refuses bad parameters and grids in one line."""

import pytest
import torch
from typer.testing import CliRunner

from attnbench import get_backend
from attnbench.backends.scram import candidate_mask
from attnbench.backends.softmax import softmax_weights
from attnbench.cli import app
from attnbench.errors import UsageError
from attnbench.inputs import grid_qkv
from attnbench.kernels.patchmatch import reference
from attnbench.measure.metrics import argmax_hit_rate


def test_covering_every_key_equals_dense_softmax():
    q, k, v = grid_qkv("blobs", 4, 5, d=3)
    out = get_backend("scram:kappa=20,b=0")(q, k, v, grid=(4, 5))
    torch.testing.assert_close(out, get_backend("softmax")(q, k, v), rtol=1e-5, atol=1e-6)


def _mask(batch: int, n: int) -> torch.Tensor:
    """Batch 0 drops its last keys, batch 1 a scattered third; batch 2 (if any) all."""
    mask = torch.ones(batch, n, dtype=torch.bool)
    mask[0, n - 6 :] = False
    mask[1, ::3] = False
    mask[2:] = False
    return mask


def test_covering_every_valid_key_equals_masked_softmax():
    q, k, v = (t.expand(3, 2, -1, -1).clone() for t in grid_qkv("blobs", 4, 5, d=3))
    mask = _mask(3, 20)
    out = get_backend("scram:kappa=20,b=0")(q, k, v, mask, grid=(4, 5))
    expected = get_backend("softmax")(q, k, v, mask)
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-6)
    assert torch.isfinite(out).all() and (out[2] == 0).all()


@pytest.mark.parametrize("variant", ["max", "mode"])
def test_masked_keys_are_never_matched_nor_attended(variant):
    q, k, v = (t.expand(2, 3, -1, -1).clone() for t in grid_qkv("image:camera", 12, 12, d=3))
    mask = _mask(2, 144)
    scram = get_backend(f"scram:kappa=3,b=1,variant={variant},L=2")
    found, _ = scram.matches(q, k, (12, 12), mask)
    rows_mask = mask.repeat_interleave(3, dim=0)
    listed = found >= 0
    assert listed[:, :, 0].all()  # every query still finds a valid key
    assert rows_mask.gather(1, found.clamp(min=0).flatten(1)).view_as(found)[listed].all()
    amap = scram.map_of(q, k, mask, grid=(12, 12))
    assert (amap * ~mask[:, None, None, :] == 0).all()
    # the output is the sparse softmax over the valid keys of the candidate windows
    candidates = reference.window_candidates(found, 12, 12, 1) & rows_mask[:, None, :]
    expected = reference.sparse_softmax_reference(
        q.reshape(6, 144, 3), k.reshape(6, 144, 3), v.reshape(6, 144, 3), candidates
    ).view(2, 3, 144, 3)
    expected = expected * mask[:, None, :, None]
    out = scram(q, k, v, mask, grid=(12, 12))
    torch.testing.assert_close(out.double(), expected, rtol=0, atol=1e-5)


def test_attention_map_is_softmax_on_the_candidates():
    q, k, _ = grid_qkv("blobs", 6, 6, d=3)
    scram = get_backend("scram:kappa=2,b=1")
    amap = scram.map_of(q, k, grid=(6, 6))[0, 0]
    assert torch.allclose(amap.sum(-1), torch.ones(36, dtype=torch.float64))
    dense = softmax_weights(q.double(), k.double())[0, 0]
    support = amap > 0
    # on its support, the map is softmax renormalised over the support
    ratio = amap[support] / dense[support]
    rows = support.nonzero()[:, 0]
    for r in range(36):
        row_ratio = ratio[rows == r]
        assert torch.allclose(row_ratio, row_ratio[0].expand_as(row_ratio))


@pytest.mark.parametrize("H, W, b", [(5, 7, 1), (6, 6, 0), (1, 11, 2), (4, 3, 3)])
def test_candidate_mask_equals_the_oracle(H, W, b):
    """The map's scattered window mask equals the oracle's dense test of every key against
    every match: borders clipped, -1 skipped, overlapping windows, windows wider than the grid."""
    n = H * W
    matches = torch.randint(0, n, (2, n, 3), generator=torch.Generator().manual_seed(n + b))
    matches[0, :4, 2] = -1
    matches[1, 0] = -1
    matches[1, 1] = torch.tensor([0, n - 1, 0])  # opposite corners, one twice
    got = candidate_mask(matches.int(), H, W, b)
    assert torch.equal(got, reference.window_candidates(matches.int(), H, W, b))
    assert not got[1, 0].any()


@pytest.mark.parametrize("source", ["blobs", "image:camera"])
def test_patchmatch_finds_the_argmax_on_smooth_images(source):
    q, k, _ = grid_qkv(source, 32, 32, d=3)
    found, scores = get_backend("scram:kappa=4,T=8").matches(q, k, (32, 32))
    exact = reference.scores(q[:, 0], k[:, 0])
    assert argmax_hit_rate(scores[..., 0], exact.amax(-1)) >= 0.95


def test_modes_are_at_least_L_apart():
    q, k, _ = grid_qkv("image:camera", 24, 20, d=3)
    found, _ = get_backend("scram:kappa=4,variant=mode,L=3").matches(q, k, (24, 20))
    ys, xs = found.long() // 20, found.long() % 20
    valid = found >= 0
    for a in range(4):
        for c in range(a + 1, 4):
            both = valid[..., a] & valid[..., c]
            cheb = torch.maximum((ys[..., a] - ys[..., c]).abs(), (xs[..., a] - xs[..., c]).abs())
            assert (cheb[both] >= 3).all()


def test_same_seed_same_output_other_seed_other_matches():
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 1, 256, 3, generator=gen) for _ in range(3))
    a, b = get_backend("scram:seed=1,T=1,jumps=1"), get_backend("scram:seed=2,T=1,jumps=1")
    assert torch.equal(a(q, k, v, grid=(16, 16)), a(q, k, v, grid=(16, 16)))
    assert not torch.equal(a.matches(q, k, (16, 16))[0], b.matches(q, k, (16, 16))[0])


def test_sequences_work_as_1_by_n_grids():
    q, k, v = grid_qkv("image:camera", 1, 64, d=4)
    out = get_backend("scram:kappa=2,b=2")(q, k, v)
    assert out.shape == (1, 1, 64, 3) and torch.isfinite(out).all()


@pytest.mark.parametrize(
    "spec", ["scram:kappa=0", "scram:b=-1", "scram:L=0", "scram:T=0", "scram:kappa=33",
             "scram:variant=best", "scram:jumps=4/0"],
)  # fmt: skip
def test_bad_parameters_are_usage_errors(spec):
    with pytest.raises(UsageError):
        get_backend(spec)


def test_window_larger_than_the_grid_is_a_usage_error():
    q, k, v = grid_qkv("blobs", 3, 3, d=3)
    with pytest.raises(UsageError, match="does not fit"):
        get_backend("scram:b=2")(q, k, v, grid=(3, 3))


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--grid", "8x8", "--backends", "scram:kappa=0"], "kappa"),
        (["--grid", "2x2", "--backends", "scram:b=1"], "does not fit"),
    ],
)
def test_cli_reports_bad_scram_cases(tmp_path, args, message):
    result = CliRunner().invoke(
        app, ["time", *args, "--dim", "3", "--heads", "1", "--repeats", "1",
              "--csv", str(tmp_path / "r.csv")],
    )  # fmt: skip
    if result.exit_code == 2:  # refused before running
        assert message in result.output
    else:  # or recorded as an error row naming the problem, the sweep going on
        assert result.exit_code == 0 and message in (tmp_path / "r.csv").read_text()
