"""Images as attention inputs (SCRAM seed, Figs. 2-4): queries, keys and values are H x W
grids of d-dimensional vectors, row-major (token p = y * W + x), built from a real
photograph or from smooth synthetic blobs, so attention maps have the spatial coherence
PatchMatch relies on.

A photograph becomes vectors as the seed does, by a low-rank SVD: every pixel's
(2r+1) x (2r+1) grey-level patch, centred, projected on the top d singular directions of
all patches. Queries and keys are these features (self-attention over the image), scaled so
scores q.k / sqrt(d) have a spread of `sharpness`; values are the pixels' colours.
"""

from __future__ import annotations

import functools

import numpy as np
import torch

from attnbench.errors import UsageError

# Sample images whose files ship inside scikit-image's wheel (nothing is downloaded).
IMAGES = ("astronaut", "brick", "camera", "chelsea", "coffee", "coins", "grass", "moon", "rocket")
PATCH_RADIUS = 1
# A photograph is stretched at most this many times along a side: beyond, every patch is a
# smooth ramp and the resize alone holds gigabytes.
MAX_UPSCALE = 16


@functools.cache
def image_shape(name: str) -> tuple[int, int]:
    """(height, width) of the bundled image `name`, as scikit-image ships it."""
    import skimage.data

    return getattr(skimage.data, name)().shape[:2]


def check_resize(source: str, height: int, width: int) -> None:
    """An H x W grid of "image:NAME" stretches the photograph at most MAX_UPSCALE times per side
    (blobs are drawn at any size)."""
    if not source.startswith("image:"):
        return
    name = source.removeprefix("image:")
    if name not in IMAGES:
        raise UsageError(f"--inputs: unknown image {name!r}; valid: {', '.join(IMAGES)}")
    image_h, image_w = image_shape(name)
    if height > MAX_UPSCALE * image_h or width > MAX_UPSCALE * image_w:
        raise UsageError(
            f"--grid {height}x{width}: {name} is {image_h}x{image_w} pixels; a grid may "
            f"stretch it at most {MAX_UPSCALE} times per side, to "
            f"{MAX_UPSCALE * image_h}x{MAX_UPSCALE * image_w}"
        )


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


def grid_qkv(
    source: str, height: int, width: int, d: int, seed: int = 0, sharpness: float = 4.0
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """q, k [1, 1, H*W, d] and v [1, 1, H*W, 3] from "image:NAME" or "blobs"."""
    if source == "blobs":
        features = blob_field(height, width, d, seed)
        colours = blob_field(height, width, 3, seed + 1)
    elif source.startswith("image:"):
        image = load_image(source.removeprefix("image:"), height, width)
        features = patch_features(image.mean(axis=-1), d)
        colours = image.reshape(height * width, 3)
    else:
        raise UsageError(f"unknown grid input {source!r}; use blobs or image:NAME")
    # Scores q.k / sqrt(d) spread over about `sharpness`: attention is peaked, not flat.
    scale = np.sqrt(sharpness * np.sqrt(d)) / max(float(features.std()) * np.sqrt(d), 1e-12)
    q = torch.from_numpy((features * scale).astype(np.float32))[None, None]
    v = torch.from_numpy(np.ascontiguousarray(colours))[None, None]
    return q, q.clone(), v
