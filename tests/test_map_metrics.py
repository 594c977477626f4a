"""Attention-map metrics (captured mass, TV distance, hit rate, recall) on hand-made maps."""

import torch

from attnbench import get_backend
from attnbench.backends.softmax import softmax_weights
from attnbench.measure.metrics import (
    argmax_hit_rate,
    captured_mass,
    map_metrics,
    recall_at_k,
    total_variation,
)

P = torch.tensor([[0.5, 0.3, 0.2, 0.0], [0.25, 0.25, 0.25, 0.25]], dtype=torch.float64)


def test_captured_mass_sums_softmax_on_the_support():
    support = torch.tensor([[True, False, True, False], [False, False, False, True]])
    assert torch.allclose(captured_mass(P, support), torch.tensor([0.7, 0.25], dtype=torch.float64))


def test_total_variation_normalises_the_method_map_first():
    method = torch.tensor([[2.0, 0.0, 0.0, 0.0], [1.0, 1.0, 1.0, 1.0]])  # unnormalised rows
    assert torch.allclose(total_variation(P, method), torch.tensor([0.5, 0.0], dtype=torch.float64))


def test_map_metrics_of_softmax_itself_are_perfect():
    q, k = torch.randn(1, 2, 9, 4), torch.randn(1, 2, 9, 4)
    weights = softmax_weights(q.double(), k.double())
    m = map_metrics(weights, get_backend("softmax").attention_map(q, k))
    assert abs(m["captured_mass_vs_softmax"] - 1) < 1e-12 and m["tv_vs_softmax"] < 1e-6
    assert abs(m["captured_mass_p5_vs_softmax"] - 1) < 1e-12


def test_map_metrics_of_a_one_key_map():
    """A map keeping only key 0 captures exactly softmax's weight on key 0."""
    weights = torch.softmax(torch.randn(3, 5, dtype=torch.float64), -1)
    only_first = torch.zeros(3, 5)
    only_first[:, 0] = 1
    m = map_metrics(weights, only_first)
    assert abs(m["captured_mass_vs_softmax"] - weights[:, 0].mean().item()) < 1e-12
    assert abs(m["tv_vs_softmax"] - (1 - weights[:, 0]).mean().item()) < 1e-12


def test_argmax_hit_rate_and_recall():
    scores = torch.tensor([[1.0, 3.0, 2.0], [5.0, 4.0, 0.0]])
    assert argmax_hit_rate(torch.tensor([3.0, 4.0]), scores.amax(-1)) == 0.5
    found = torch.tensor([[1, 0], [0, 2]])
    truth = torch.tensor([[1, 2], [0, 1]])
    assert recall_at_k(found, truth) == 0.5
