"""Image inputs for SCRAM: bundled photographs and blobs as smooth grids of vectors."""

import pytest
import torch

from attnbench.errors import UsageError
from attnbench.images import IMAGES, grid_qkv, load_image, patch_features


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
