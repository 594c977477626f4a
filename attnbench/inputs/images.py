"""Images as attention inputs (SCRAM seed, Figs. 2-4): `blobs`, `image:NAME`, `svd:NAME`
and `three-blobs`. Queries, keys and values are H x W grids of d-dimensional vectors,
row-major (token p = y * W + x), built from a real photograph or from smooth synthetic
blobs, so attention maps have the spatial coherence PatchMatch relies on.

A photograph becomes vectors as the seed does, by a low-rank SVD: every pixel's
(2r+1) x (2r+1) grey-level patch, centred, projected on the top d singular directions of
all patches. Queries and keys are these features (self-attention over the image), scaled so
scores q.k / sqrt(d) have a spread of `sharpness`; values are the pixels' colours.

Two sources rebuild the SCRAM seed's map figures as its text describes them:
- `svd:NAME` (Fig. 2): queries and keys are a rank-d SVD of the photograph resized to n x n,
  q_i = U_i S^1/2 (image row i), k_j = V_j S^1/2 (image column j), so the score matrix Q K^T
  is the image's best rank-d approximation and the full map shows the picture; Q != K.
  The seed lays the n = 128 tokens on a 128 x 1 grid.
- `three-blobs` (Fig. 3): keys hold three Gaussian blobs of unequal strength along one
  feature direction; queries are the keys plus a constant along it, so every query, such as
  the seed's q_{4,5}, is drawn to all three blobs and most to the strongest one.
"""

from __future__ import annotations

import functools

import numpy as np
import torch

from attnbench.errors import UsageError
from attnbench.inputs.base import Source

# Sample images whose files ship inside scikit-image's wheel (nothing is downloaded).
IMAGES = ("astronaut", "brick", "camera", "chelsea", "coffee", "coins", "grass", "moon", "rocket")
PATCH_RADIUS = 1
SHARPNESS = 4.0  # the spread of the scores q.k / sqrt(d) of every picture
# `svd:NAME` builds and decomposes an n x n image: dense, so n is kept to map sizes.
MAX_SVD_TOKENS = 4096
# Fig. 3's blobs: centre (y, x) as a fraction of the grid, width as a fraction of the longer
# side, and strength; the first is the strongest ("darkest") one.
BLOBS3 = ((0.3, 0.25, 0.12, 1.0), (0.7, 0.5, 0.12, 0.8), (0.35, 0.8, 0.12, 0.65))
# A photograph is stretched at most this many times along a side: beyond, every patch is a
# smooth ramp and the resize alone holds gigabytes.
MAX_UPSCALE = 16


@functools.cache
def image_shape(name: str) -> tuple[int, int]:
    """(height, width) of the bundled image `name`, as scikit-image ships it."""
    import skimage.data

    return getattr(skimage.data, name)().shape[:2]


def check_image(name: str) -> None:
    """`name` is one of the bundled IMAGES."""
    if name not in IMAGES:
        raise UsageError(f"--inputs: unknown image {name!r}; valid: {', '.join(IMAGES)}")


def build_bytes(height: int, width: int, d: int) -> int:
    """An upper estimate of the memory `grid_qkv` holds at once: float64 patches, singular
    vectors, features and blob fields, about 32 + 2 d numbers per pixel."""
    return height * width * 8 * (32 + 2 * d)


def load_image(name: str, height: int, width: int) -> np.ndarray:
    """The bundled image `name` resized to [height, width, 3], float32 in [0, 1]."""
    if name not in IMAGES:
        raise UsageError(f"unknown image {name!r}; valid: {', '.join(IMAGES)}")
    import skimage.data
    from skimage.transform import resize

    image = getattr(skimage.data, name)().astype(np.float32) / 255.0
    if image.ndim == 2:
        image = np.repeat(image[..., None], 3, axis=-1)
    image = image[..., :3]
    return resize(image, (height, width), anti_aliasing=True).astype(np.float32)


def patch_features(grey: np.ndarray, d: int, radius: int = PATCH_RADIUS) -> np.ndarray:
    """[H*W, d]: each pixel's centred patch projected on the patches' top-d SVD directions
    (edge pixels repeat the border). Fewer directions than d are padded with zeros."""
    h, w = grey.shape
    padded = np.pad(grey, radius, mode="edge")
    size = 2 * radius + 1
    patches = np.stack(
        [padded[dy : dy + h, dx : dx + w] for dy in range(size) for dx in range(size)], axis=-1
    ).reshape(h * w, size * size)
    patches = patches - patches.mean(axis=0)
    _, _, vt = np.linalg.svd(patches.astype(np.float64), full_matrices=False)
    features = np.zeros((h * w, d))
    rank = min(d, vt.shape[0])
    features[:, :rank] = patches @ vt[:rank].T
    return features.astype(np.float32)


def blob_field(height: int, width: int, d: int, seed: int, blobs: int = 6) -> np.ndarray:
    """[H*W, d]: a sum of Gaussian bumps with random centres, widths and d-dim amplitudes."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width].astype(np.float64)
    field = np.zeros((height, width, d))
    for _ in range(blobs):
        cy, cx = rng.uniform(0, height), rng.uniform(0, width)
        sigma = rng.uniform(0.1, 0.3) * max(height, width)
        bump = np.exp(-((y - cy) ** 2 + (x - cx) ** 2) / (2 * sigma**2))
        field += bump[..., None] * rng.normal(size=d)
    return field.reshape(height * width, d).astype(np.float32)


def svd_qkv(name: str, n: int, d: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Unscaled q, k [n, d] and v [n, 3] of `svd:NAME`: the grey image resized to n x n,
    q = U_d S_d^1/2 and k = V_d S_d^1/2, so q k^T is its best rank-d approximation (Eckart-
    Young); v is each image column's mean colour. Fewer than d directions are zero-padded."""
    image = load_image(name, n, n)
    u, s, vt = np.linalg.svd(image.mean(axis=-1).astype(np.float64))
    rank = min(d, s.shape[0])
    q, k = np.zeros((n, d)), np.zeros((n, d))
    q[:, :rank] = u[:, :rank] * np.sqrt(s[:rank])
    k[:, :rank] = vt[:rank].T * np.sqrt(s[:rank])
    return q, k, image.mean(axis=0)


def three_blobs_qkv(height: int, width: int, d: int, seed: int):
    """Unscaled q, k [H*W, d] and v [H*W, 3] of `three-blobs`: keys are the BLOBS3 field
    along the first feature, queries the same plus 1 along it, so a query far from the
    blobs scores each key by the field alone and sees all three, the first most strongly;
    v is a seeded smooth colour field."""
    y, x = np.mgrid[0:height, 0:width].astype(np.float64)
    field = np.zeros((height, width))
    for cy, cx, width_frac, strength in BLOBS3:
        sigma = width_frac * max(height, width)
        field += strength * np.exp(
            -((y - cy * (height - 1)) ** 2 + (x - cx * (width - 1)) ** 2) / (2 * sigma**2)
        )
    k = np.zeros((height * width, d))
    k[:, 0] = field.reshape(-1)
    q = k.copy()
    q[:, 0] += 1.0
    return q, k, blob_field(height, width, 3, seed)


def _scaled(q: np.ndarray, k: np.ndarray, spread: float) -> tuple[np.ndarray, np.ndarray]:
    """q and k times one common factor so scores q.k / sqrt(d) have standard deviation
    `spread` (peaked, not flat, attention); the map's shape is unchanged."""
    d = q.shape[1]
    scores = (q @ k.T).std() / np.sqrt(d)
    factor = np.sqrt(spread / max(float(scores), 1e-12))
    return q * factor, k * factor


def _tensor(a: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(a, dtype=np.float32))[None, None]


def _features_qkv(features: np.ndarray, colours: np.ndarray, sharpness: float):
    """Self-attention over per-pixel features: q = k = the features scaled so that scores
    q.k / sqrt(d) spread over about `sharpness` (peaked, not flat); v = the colours."""
    d = features.shape[1]
    scale = np.sqrt(sharpness * np.sqrt(d)) / max(float(features.std()) * np.sqrt(d), 1e-12)
    q = torch.from_numpy((features * scale).astype(np.float32))[None, None]
    v = torch.from_numpy(np.ascontiguousarray(colours))[None, None]
    return q, q.clone(), v


class GridInputs(Source):
    """A picture: q, k [1, 1, H*W, d] and v [1, 1, H*W, 3] on an H x W grid, one picture
    and one head (a study repeats it over its batch and heads)."""

    on_grid = True

    def __init__(self, kind: str, batch: int, heads: int, dim: int):
        super().__init__(kind, 1, 1, dim)

    def grid_qkv(
        self, height: int, width: int, seed: int = 0, sharpness: float = SHARPNESS
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:  # pragma: no cover - abstract
        """q, k, v of the picture on an H x W grid, scores spread over about `sharpness`."""
        raise NotImplementedError

    def draw(self, n, seed, grid):
        if grid is None:
            raise UsageError(f"--inputs {self.kind} needs --grid HxW")
        return self.grid_qkv(grid[0], grid[1], seed)


class BlobsInputs(GridInputs):
    """`blobs`: smooth random blobs as features and as colours, any grid size."""

    names = usage = ("blobs",)

    def grid_qkv(self, height, width, seed=0, sharpness=SHARPNESS):
        features = blob_field(height, width, self.dim, seed)
        colours = blob_field(height, width, 3, seed + 1)
        return _features_qkv(features, colours, sharpness)


class ImageInputs(GridInputs):
    """`image:NAME`: a bundled photograph's patch features, its pixels' colours as values."""

    names, usage = ("image:",), ("image:NAME",)

    def __init__(self, kind: str, batch: int, heads: int, dim: int):
        super().__init__(kind, batch, heads, dim)
        self.image = kind.removeprefix("image:")
        check_image(self.image)

    def check_grid(self, height: int, width: int) -> None:
        """The grid stretches the photograph at most MAX_UPSCALE times per side."""
        image_h, image_w = image_shape(self.image)
        if height > MAX_UPSCALE * image_h or width > MAX_UPSCALE * image_w:
            raise UsageError(
                f"--grid {height}x{width}: {self.image} is {image_h}x{image_w} pixels; a grid "
                f"may stretch it at most {MAX_UPSCALE} times per side, to "
                f"{MAX_UPSCALE * image_h}x{MAX_UPSCALE * image_w}"
            )

    def grid_qkv(self, height, width, seed=0, sharpness=SHARPNESS):
        image = load_image(self.image, height, width)
        features = patch_features(image.mean(axis=-1), self.dim)
        return _features_qkv(features, image.reshape(height * width, 3), sharpness)


class SvdInputs(GridInputs):
    """`svd:NAME` (SCRAM Fig. 2): the rank-d SVD factors of the photograph, see svd_qkv."""

    names, usage = ("svd:",), ("svd:NAME",)

    def __init__(self, kind: str, batch: int, heads: int, dim: int):
        super().__init__(kind, batch, heads, dim)
        self.image = kind.removeprefix("svd:")
        check_image(self.image)

    def check_grid(self, height: int, width: int) -> None:
        """The n x n image decomposed is dense: n is kept to map sizes."""
        if height * width > MAX_SVD_TOKENS:
            raise UsageError(
                f"--grid {height}x{width}: {self.kind} decomposes an n x n image, "
                f"at most {MAX_SVD_TOKENS} tokens"
            )

    def grid_qkv(self, height, width, seed=0, sharpness=SHARPNESS):
        self.check_grid(height, width)
        q, k, v = svd_qkv(self.image, height * width, self.dim)
        q, k = _scaled(q, k, sharpness)
        return _tensor(q), _tensor(k), _tensor(v)


class ThreeBlobsInputs(GridInputs):
    """`three-blobs` (SCRAM Fig. 3): three key blobs of unequal strength, see three_blobs_qkv."""

    names = usage = ("three-blobs",)

    def grid_qkv(self, height, width, seed=0, sharpness=SHARPNESS):
        q, k, v = three_blobs_qkv(height, width, self.dim, seed)
        # a query far from the blobs scores the strongest blob's centre about `sharpness`
        factor = np.sqrt(sharpness * np.sqrt(self.dim) / max(float(k[:, 0].max()), 1e-12))
        q, k = q * factor, k * factor
        return _tensor(q), _tensor(k), _tensor(v)
