import numpy as np
import pytest
import torch

from attnbench.backends.softmax import softmax_weights
from attnbench.errors import UsageError
from attnbench.inputs import CLUSTERS, Inputs, clustered_qkv, load_qkv


@pytest.mark.parametrize("kind", ["random", "clustered"])
def test_generated_inputs_are_seeded(kind):
    src = Inputs(kind, 1, 2, 8)
    a = src.make(16, 3, torch.float32, "cpu")
    assert all(t.shape == (1, 2, 16, 8) for t in a)
    assert all(
        torch.equal(x, y) for x, y in zip(a, src.make(16, 3, torch.float32, "cpu"), strict=True)
    )
    assert not torch.equal(a[0], src.make(16, 4, torch.float32, "cpu")[0])


def test_clustered_attention_is_concentrated():
    q, k, _ = clustered_qkv(1, 2, 512, 64, seed=0)
    weights = softmax_weights(q, k)
    # a uniform row puts 1/CLUSTERS of its mass on any one cluster; ours concentrate
    top = weights.sort(dim=-1, descending=True).values[..., : 512 // CLUSTERS].sum(-1)
    assert top.mean() > 0.6


def test_file_inputs_accept_lower_rank_arrays(tmp_path):
    path = tmp_path / "qkv.npz"
    arr = np.random.default_rng(0).standard_normal((10, 4)).astype(np.float32)
    np.savez(path, q=arr, k=arr, v=arr[:, :3])
    q, k, v = load_qkv(path)
    assert q.shape == (1, 1, 10, 4) and v.shape == (1, 1, 10, 3)
    src = Inputs(str(path), 1, 1, 1)
    assert src.label == "qkv.npz" and src.make(6, 0, torch.float64, "cpu")[0].shape[2] == 6
    with pytest.raises(UsageError, match="longer than the 10 tokens"):
        src.check_lengths([8, 16])


def test_pt_inputs(tmp_path):
    path = tmp_path / "qkv.pt"
    t = torch.randn(2, 3, 5, 4)
    torch.save({"q": t, "k": t, "v": t}, path)
    assert load_qkv(path)[0].shape == (2, 3, 5, 4)
