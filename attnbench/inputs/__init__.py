"""Q, K, V for the studies, from input sources registered like the backends.

`Inputs(text, batch, heads, dim)` turns an `--inputs` text into a source (registry.py
lists the kinds): generated (`random`, `clustered[:size=N]`, generated.py), a .npz/.pt file
(files.py), a picture (`blobs`, `image:NAME`, `svd:NAME`, `three-blobs`, images.py) or a
trained model's (`model:minilm[:layer=L,head=H]`, models.py). Every source is a `Source`
(base.py): `make(n, seed, dtype, device, grid)` gives the same tensors for the same seed on
every device.
"""

from attnbench.inputs.base import Source
from attnbench.inputs.generated import clustered_qkv, random_qkv
from attnbench.inputs.registry import Inputs, check_resize, grid_qkv, source_class

__all__ = [
    "Inputs",
    "Source",
    "check_resize",
    "clustered_qkv",
    "grid_qkv",
    "random_qkv",
    "source_class",
]
