import numpy as np
import pytest
import torch
import torch.nn.functional as F

from attnbench.backends.softmax import softmax_weights
from attnbench.errors import UsageError
from attnbench.inputs import Inputs, clustered_qkv, grid_qkv
from attnbench.inputs.files import load_qkv
from attnbench.inputs.generated import CLUSTERS


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


FAMILIES = ["base", "files", "generated", "images", "models", "trained"]
HELPERS = ["checkpoint"]  # a family's own parts (trained's checks of its checkpoint)


def test_inputs_modules_import_only_downward():
    """base imports no other inputs module, the families only base (and their helpers), and
    the registry (and the package) the families: no module of attnbench.inputs reaches
    itself through another."""
    import grimp

    graph = grimp.build_graph("attnbench")
    modules = sorted(m for m in graph.modules if m.startswith("attnbench.inputs"))
    assert modules == sorted(["attnbench.inputs", *(f"attnbench.inputs.{m}" for m in FAMILIES),
                              *(f"attnbench.inputs.{m}" for m in HELPERS),
                              "attnbench.inputs.registry"])  # fmt: skip
    for family in FAMILIES + HELPERS:
        for above in ("attnbench.inputs", "attnbench.inputs.registry"):
            assert graph.find_shortest_chain(f"attnbench.inputs.{family}", above) is None
    for a in modules:
        for b in modules:
            if a != b:
                assert not (graph.find_shortest_chain(a, b) and graph.find_shortest_chain(b, a))
    below = graph.find_modules_that_directly_import("attnbench.inputs.base")
    assert {f"attnbench.inputs.{m}" for m in FAMILIES[1:]} <= below


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        ("random", "RandomInputs"),
        ("clustered", "ClusteredInputs"),
        ("clustered:size=3", "ClusteredInputs"),
        ("model:minilm", "ModelInputs"),
        ("blobs", "BlobsInputs"),
        ("image:camera", "ImageInputs"),
        ("svd:camera", "SvdInputs"),
        ("three-blobs", "ThreeBlobsInputs"),
        ("some/dir/qkv.npz", "FileInputs"),
        ("image:x.npz", "ImageInputs"),  # a kind's prefix wins over a file suffix
        ("randomx", None),
        ("image", None),
    ],
)
def test_one_registry_names_every_kind(text, kind):
    from attnbench.inputs import source_class

    cls = source_class(text)
    assert (cls.__name__ if cls else None) == kind


def test_an_unknown_kind_lists_every_kind():
    with pytest.raises(UsageError) as info:
        Inputs("noise", 1, 1, 4)
    assert str(info.value) == (
        "--inputs: noise is not a .npz or .pt file, nor one of random, clustered, "
        "clustered:size=N, model:yoso-mlm, model:minilm, blobs, image:NAME, svd:NAME, "
        "three-blobs"
    )


@pytest.mark.parametrize("text", ["blobs", "image:camera", "svd:camera", "three-blobs"])
def test_pictures_are_one_picture_one_head_drawn_on_the_grid(text):
    src = Inputs(text, 2, 3, 4)
    assert (src.batch, src.heads, src.dim, src.on_grid, src.fixed_shape) == (1, 1, 4, True, False)
    assert src.label == text
    q, k, v = src.make(8, 1, torch.float64, "cpu", (2, 4))
    want = grid_qkv(text, 2, 4, 4, seed=1)
    assert all(torch.equal(a, b.double()) for a, b in zip((q, k, v), want, strict=True))
    with pytest.raises(UsageError, match=f"--inputs {text} needs --grid HxW"):
        src.make(8, 1, torch.float32, "cpu")


@pytest.mark.parametrize("text", ["random", "clustered:size=2", "blobs", "svd:camera"])
def test_sources_pickle_to_the_same_inputs(text):
    import pickle

    src = Inputs(text, 1, 2, 4)
    copy = pickle.loads(pickle.dumps(src))
    assert type(copy) is type(src) and copy.label == src.label
    a = src.make(4, 0, torch.float32, "cpu", (2, 2))
    b = copy.make(4, 0, torch.float32, "cpu", (2, 2))
    assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True))
