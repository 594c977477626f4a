import numpy as np
import pytest
import torch
import torch.nn.functional as F

from attnbench.backends.softmax import softmax_weights
from attnbench.errors import UsageError
from attnbench.inputs import CLUSTERS, Inputs, clustered_qkv, load_qkv


@pytest.mark.parametrize("kind", ["random", "clustered", "clustered:size=4"])
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


def same_cluster_counts(q, k):
    """Per query, how many keys point its way (cosine > 0.7): its cluster's size, since the
    noise around a centre is small and random centres in d = 64 are nearly orthogonal."""
    cos = F.normalize(q, dim=-1) @ F.normalize(k, dim=-1).transpose(-1, -2)
    return (cos > 0.7).sum(-1)


@pytest.mark.parametrize("n", [64, 256, 1024])
def test_clustered_size_keeps_clusters_of_fixed_size(n):
    q, k, _ = Inputs("clustered:size=8", 1, 2, 64).make(n, 0, torch.float32, "cpu")
    assert (same_cluster_counts(q, k) == 8).all()


def test_clustered_size_last_cluster_takes_the_rest():
    q, k, _ = clustered_qkv(1, 1, 100, 64, seed=1, size=8)
    counts = same_cluster_counts(q, k).flatten()
    assert (counts == 8).sum() == 96 and (counts == 4).sum() == 4


def test_plain_clustered_has_a_fixed_number_of_clusters():
    """Today's clustered: CLUSTERS clusters, each about n / CLUSTERS tokens, at any n."""
    n = 1024
    q, k, _ = Inputs("clustered", 1, 2, 64).make(n, 0, torch.float32, "cpu")
    counts = same_cluster_counts(q, k).float()
    assert counts.min() > n / CLUSTERS / 2 and counts.max() < 2 * n / CLUSTERS
    assert torch.equal(q, clustered_qkv(1, 2, n, 64, seed=0)[0])


def test_clustered_size_label_and_bad_options():
    assert Inputs("clustered:size=8", 1, 1, 4).label == "clustered:size=8"
    assert Inputs("clustered", 1, 1, 4).label == "clustered"
    for kind, message in [
        ("clustered:size=0", "N >= 1"),
        ("clustered:size=x", "non-negative integer"),
        ("clustered:count=3", "bad option"),
        ("clustered:", "N >= 1"),
    ]:
        with pytest.raises(UsageError, match=message):
            Inputs(kind, 1, 1, 4)


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
