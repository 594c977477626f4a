"""Image inputs for SCRAM: bundled photographs and blobs as smooth grids of vectors."""

import pytest
import torch

from attnbench.errors import UsageError
from attnbench.inputs import grid_qkv
from attnbench.inputs.images import IMAGES, load_image, patch_features


@pytest.mark.parametrize("name", IMAGES)
def test_every_listed_image_loads_without_a_download(name):
    image = load_image(name, 12, 17)
    assert image.shape == (12, 17, 3) and image.dtype.name == "float32"
    assert 0.0 <= image.min() and image.max() <= 1.0 and image.std() > 0


@pytest.mark.parametrize("source", ["image:camera", "image:astronaut", "blobs"])
@pytest.mark.parametrize(("h", "w"), [(16, 16), (8, 13), (1, 128)])
def test_grid_inputs_are_shaped_finite_and_reproducible(source, h, w):
    q, k, v = grid_qkv(source, h, w, d=3, seed=1)
    assert q.shape == k.shape == (1, 1, h * w, 3) and v.shape == (1, 1, h * w, 3)
    assert q.dtype == k.dtype == v.dtype == torch.float32
    assert all(torch.isfinite(t).all() for t in (q, k, v))
    again = grid_qkv(source, h, w, d=3, seed=1)
    assert all(torch.equal(a, b) for a, b in zip((q, k, v), again, strict=True))


@pytest.mark.parametrize("source", ["image:camera", "blobs"])
def test_neighbouring_pixels_are_more_alike_than_distant_ones(source):
    """The spatial coherence PatchMatch relies on."""
    h = w = 32
    q, _, _ = grid_qkv(source, h, w, d=3)
    grid = q[0, 0].view(h, w, 3)
    near = (grid[:, 1:] - grid[:, :-1]).norm(dim=-1).mean()
    gen = torch.Generator().manual_seed(0)
    perm = torch.randperm(h * w, generator=gen)
    far = (q[0, 0] - q[0, 0, perm]).norm(dim=-1).mean()
    assert near < 0.5 * far


def test_patch_features_project_on_the_top_singular_directions():
    grey = torch.rand(9, 7, generator=torch.Generator().manual_seed(2)).numpy()
    f = patch_features(grey, d=4)
    assert f.shape == (63, 4)
    variances = f.var(axis=0)
    assert (variances[:-1] >= variances[1:] - 1e-6).all()  # ordered by singular value


@pytest.mark.parametrize("source", ["blobs", "image:camera"])
@pytest.mark.parametrize("sharpness", [2.0, 8.0])
def test_scores_have_about_the_requested_spread(source, sharpness):
    q, k, _ = grid_qkv(source, 32, 32, d=4, sharpness=sharpness)
    scores = (q[0, 0] @ k[0, 0].T) / 2.0  # sqrt(d) = 2
    assert 0.5 * sharpness < scores.std() < 1.5 * sharpness


@pytest.mark.parametrize("source", ["image:nope", "noise", "image:"])
def test_unknown_sources_name_the_valid_ones(source):
    with pytest.raises(UsageError, match="unknown"):
        grid_qkv(source, 4, 4, d=3)


def test_svd_inputs_are_the_rank_4_factors_of_the_image():
    """SCRAM Fig. 2: n = 128 tokens, q k^T is the image's best rank-4 approximation."""
    import numpy as np

    from attnbench.inputs.images import load_image

    q, k, v = grid_qkv("svd:camera", 1, 128, d=4)
    assert q.shape == k.shape == (1, 1, 128, 4) and v.shape == (1, 1, 128, 3)
    assert not torch.equal(q, k)
    scores = q[0, 0].double() @ k[0, 0].double().T
    assert torch.linalg.matrix_rank(scores, rtol=1e-5).item() == 4  # float32 factors
    grey = torch.from_numpy(load_image("camera", 128, 128).mean(axis=-1)).double()
    u, s, vh = torch.linalg.svd(grey)
    rank4 = u[:, :4] @ torch.diag(s[:4]) @ vh[:4]
    # equal up to the one positive factor that sets the scores' spread
    factor = (scores * rank4).sum() / (rank4 * rank4).sum()
    assert factor > 0
    assert torch.allclose(scores, factor * rank4, atol=1e-4 * float(scores.abs().max()))
    assert np.isclose(float((scores / 2.0).std()), 4.0, rtol=1e-3)  # sharpness / sqrt(d)


def test_svd_inputs_refuse_a_large_grid_and_an_unknown_image():
    with pytest.raises(UsageError, match="at most 4096 tokens"):
        grid_qkv("svd:camera", 128, 128, d=4)
    with pytest.raises(UsageError, match="unknown image"):
        grid_qkv("svd:nope", 1, 16, d=4)


def test_three_blobs_keys_hold_three_blobs_and_the_query_sees_all_three():
    """SCRAM Fig. 3: the key image has three separate maxima of unequal strength; the
    softmax map of q_{4,5} peaks at the strongest one."""
    from attnbench.inputs.images import BLOBS3

    h = w = 32
    q, k, _ = grid_qkv("three-blobs", h, w, d=4)
    field = k[0, 0, :, 0].view(h, w)
    padded = torch.nn.functional.pad(field[None, None], (1, 1, 1, 1), value=-1.0)[0, 0]
    neighbours = torch.stack(
        [padded[1 + dy : 1 + dy + h, 1 + dx : 1 + dx + w]
         for dy in (-1, 0, 1) for dx in (-1, 0, 1) if (dy, dx) != (0, 0)]
    )  # fmt: skip
    peaks = (field > neighbours.amax(0)).nonzero().tolist()
    assert len(peaks) == 3
    strongest = max(BLOBS3, key=lambda b: b[3])
    row = torch.softmax(q[0, 0, 4 * w + 5] @ k[0, 0].T / 2.0, -1).view(h, w)
    y, x = divmod(int(row.argmax()), w)
    assert abs(y - strongest[0] * (h - 1)) <= 1 and abs(x - strongest[1] * (w - 1)) <= 1
    for py, px in peaks:  # every blob holds clearly more weight than the background
        assert row[py, px] > 5 * row.median()
