"""The error study's gradient mode (error --mode fwdbwd): each metric against a direct
computation, exact backends at rounding, planted bias and noise recovered, and the commands
that read its rows."""

from __future__ import annotations

import math

import pandas as pd
import pytest
import torch
from typer.testing import CliRunner

import attnbench.cli.core as cli
from attnbench import get_backend
from attnbench.errors import UsageError
from attnbench.inputs import Inputs
from attnbench.measure.gradients import cosine, draw_statistics, pooled_bias, pooled_noise
from attnbench.run import runner
from attnbench.studies import gradients
from attnbench.studies.error import ErrorStudy
from attnbench.views.pareto import pareto_points

cli_runner = CliRunner()
SMALL = ["--seq", "16", "--heads", "1", "--dim", "8", "--trials", "2", "--mc-seeds", "3"]


def rows_of(spec) -> list:
    return [row for batch in runner.run(spec) for row in batch]


def values(rows, backend: str) -> dict[str, float]:
    spec = get_backend(backend).spec
    return {r.metric: r.value for r in rows if r.backend == spec and r.status == "ok"}


def qkv(n=12, d=8, seed=0, dtype=torch.float64):
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(1, 2, n, d, generator=gen, dtype=dtype) for _ in range(3)]


def test_one_call_metrics_are_the_relative_error_and_the_cosine():
    gen = torch.Generator().manual_seed(1)
    grads, refs = ([torch.randn(2, 5, 3, generator=gen) for _ in range(3)] for _ in range(2))
    metrics = gradients.one_call_metrics(grads, refs, "_vs_ref")
    for name, g, r in zip(("dq", "dk", "dv"), grads, refs, strict=True):
        a, b = g.double().flatten().tolist(), r.double().flatten().tolist()
        diff = math.sqrt(sum((x - y) ** 2 for x, y in zip(a, b, strict=True)))
        norm_a, norm_b = math.sqrt(sum(x * x for x in a)), math.sqrt(sum(y * y for y in b))
        assert metrics[f"grad_rel_{name}_vs_ref"] == pytest.approx(diff / norm_b, rel=1e-12)
        dot = sum(x * y for x, y in zip(a, b, strict=True))
        assert metrics[f"grad_cos_{name}_vs_ref"] == pytest.approx(dot / norm_a / norm_b)
    zero = torch.zeros(4)
    assert cosine(zero, zero) == 1.0 and cosine(zero, torch.ones(4)) == 0.0


def test_draw_statistics_are_the_formulas_on_a_few_draws():
    gen = torch.Generator().manual_seed(2)
    draws, ref = torch.randn(5, 3, 4, generator=gen), torch.randn(3, 4, generator=gen)
    x, r = draws.double().reshape(5, -1), ref.double().flatten()
    mean = x.mean(0)
    trace = sum(float(((x[:, e] - mean[e]) ** 2).sum()) / 4 for e in range(x.shape[1]))
    stats = draw_statistics(draws, ref)
    scale = float(r @ r)
    assert stats.bias2 == pytest.approx((float((mean - r) @ (mean - r)) - trace / 5) / scale)
    assert stats.noise == pytest.approx(math.sqrt(trace / scale))
    # jackknife over draws: sqrt((S - 1) / S * sum of (leave-one-out - their mean)^2)
    loo = [draw_statistics(torch.cat([draws[:i], draws[i + 1 :]]), ref).noise for i in range(5)]
    centre = sum(loo) / 5
    jack = math.sqrt(4 / 5 * sum((v - centre) ** 2 for v in loo))
    assert stats.noise_se == pytest.approx(jack)
    assert math.isnan(draw_statistics(draws[:2], ref).noise_se)


def test_bias_and_noise_add_up_to_the_mean_squared_error_of_the_draws():
    gen = torch.Generator().manual_seed(3)
    draws, ref = torch.randn(7, 20, generator=gen) + 0.5, torch.randn(20, generator=gen)
    stats = draw_statistics(draws, ref)
    mse = float(((draws.double() - ref.double()) ** 2).sum(1).mean() / (ref.double() ** 2).sum())
    assert stats.bias2 + stats.noise**2 == pytest.approx(mse, rel=1e-12)


@pytest.mark.parametrize("planted_bias", [0.0, 0.3])
def test_planted_bias_and_noise_are_recovered_within_four_standard_errors(planted_bias):
    """Draws r + b + sigma z with known |b| / |r| and sigma sqrt(D) / |r|, several inputs."""
    gen = torch.Generator().manual_seed(4)
    size, sigma, stats = 200, 0.1, []
    for _ in range(3):
        ref = torch.randn(size, generator=gen, dtype=torch.float64)
        direction = torch.randn(size, generator=gen, dtype=torch.float64)
        offset = planted_bias * ref.norm() * direction / direction.norm()
        noise = sigma * torch.randn(16, size, generator=gen, dtype=torch.float64)
        stats.append(draw_statistics(ref + offset + noise, ref))
        want_noise = sigma * math.sqrt(size) / float(ref.norm())
        assert abs(stats[-1].noise - want_noise) <= 4 * stats[-1].noise_se
        assert abs(stats[-1].bias2 - planted_bias**2) <= 4 * stats[-1].bias2_se
    bias, bias_se = pooled_bias(stats)
    assert abs(bias - planted_bias) <= 4 * bias_se
    noise, noise_se = pooled_noise(stats)
    assert noise_se > 0 and noise == pytest.approx(sum(s.noise for s in stats) / 3)


def test_the_reference_gradient_is_softmax_autograd_in_float64_over_row_blocks():
    q, k, v = qkv(n=12)
    dy = gradients.upstream(q, v, seed=0)
    leaves = [t.clone().requires_grad_(True) for t in (q, k, v)]
    weights = torch.softmax(leaves[0] @ leaves[1].transpose(-1, -2) / math.sqrt(8), dim=-1)
    (weights @ leaves[2]).backward(dy)
    small = 8 * 12 * 2 * 5  # blocks of 5 rows: three blocks whose dK and dV add up
    for budget in (None, small):
        got = gradients.grads_by_rows(gradients.softmax_attention, q, k, v, dy, budget)
        for g, leaf in zip(got, leaves, strict=True):
            assert g.dtype == torch.float64
            assert torch.allclose(g, leaf.grad, rtol=1e-12, atol=1e-14)


def test_the_upstream_gradient_is_fixed_by_the_seed_and_apart_from_the_inputs():
    q, _, v = qkv(n=12, seed=5)
    one, again = gradients.upstream(q, v, 5), gradients.upstream(q, v, 5)
    assert torch.equal(one, again) and one.shape == (1, 2, 12, 8)
    assert not torch.equal(one, gradients.upstream(q, v, 6))
    drawn = Inputs("random", 1, 2, 8).make(12, 5, torch.float64, "cpu", None)
    assert all(not torch.allclose(one, t) for t in drawn)


def test_exact_backends_read_zero_gradient_error_against_softmax_and_themselves():
    spec = ErrorStudy(
        seqs=[16], trials=2, mc_seeds=1, inputs=Inputs("clustered", 1, 2, 8), mode="fwdbwd",
        backends=[get_backend("softmax"), get_backend("sdpa")],
    )  # fmt: skip
    rows = rows_of(spec)
    assert {r.mode for r in rows} == {"fwdbwd"}
    for backend in ("softmax", "sdpa"):
        found = values(rows, backend)
        for g in ("dq", "dk", "dv"):
            assert found[f"grad_rel_{g}_vs_softmax"] < 1e-5
            assert found[f"grad_cos_{g}_vs_softmax"] == pytest.approx(1.0, abs=1e-9)
        assert "radian_vs_softmax" in found  # the forward rows stay
    exact = "yoso-e:backward=exact"
    spec = ErrorStudy(
        seqs=[16], trials=1, mc_seeds=1, inputs=Inputs("random", 1, 1, 8), mode="fwdbwd",
        backends=[get_backend(exact)], reference=exact,
    )  # fmt: skip
    found = values(rows_of(spec), exact)
    assert max(found[f"grad_rel_{g}_vs_yoso_e"] for g in ("dq", "dk", "dv")) < 1e-4


def test_a_stochastic_backend_gets_bias_and_noise_rows_with_standard_errors():
    spec = ErrorStudy(
        seqs=[16], trials=2, mc_seeds=4, inputs=Inputs("clustered", 1, 1, 8), mode="fwdbwd",
        backends=[get_backend("yoso:m=8,backward=lsh")], reference="yoso-e:backward=lower",
    )  # fmt: skip
    rows = [r for r in rows_of(spec) if r.metric.startswith(("grad_bias", "grad_noise"))]
    assert sorted(r.metric for r in rows) == sorted(
        f"grad_{kind}_{g}_vs_yoso_e" for kind in ("bias", "noise") for g in ("dq", "dk", "dv")
    )
    for row in rows:
        assert row.status == "ok" and row.value >= 0 and row.std > 0 and row.count == 2
        assert "jackknife" in row.method and "4 draws" in row.method


def test_fwdbwd_needs_a_backward_in_every_backend_and_the_reference():
    inputs = Inputs("random", 1, 1, 8)
    with pytest.raises(UsageError, match="scram has no backward"):
        ErrorStudy(seqs=[16], inputs=inputs, mode="fwdbwd", backends=[get_backend("scram")])
    with pytest.raises(UsageError, match="--reference scram has no backward"):
        ErrorStudy(
            seqs=[16], inputs=inputs, mode="fwdbwd", backends=[get_backend("softmax")],
            reference="scram",
        )  # fmt: skip
    # the forward study compares them as before
    ErrorStudy(seqs=[16], inputs=inputs, backends=[get_backend("scram")])


def one_error_line(result) -> str:
    assert result.exit_code == 2, result.output
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0]


@pytest.mark.parametrize(
    ("options", "needle"),
    [
        (["--backends", "softmax,scram"], "scram has no backward pass"),
        (["--backends", "softmax", "--reference", "scram"], "--reference scram has no backward"),
        (["--backends", "softmax", "--mode", "bwd"], "--mode: unknown mode 'bwd'"),
    ],
)
def test_cli_refuses_gradients_it_cannot_compare_before_writing(tmp_path, options, needle):
    mode = [] if "--mode" in options else ["--mode", "fwdbwd"]
    out = tmp_path / "g.csv"
    result = cli_runner.invoke(cli.app, ["error", *SMALL, *mode, *options, "--csv", str(out)])
    assert needle in one_error_line(result)
    assert list(tmp_path.iterdir()) == []


def test_cli_writes_gradient_rows_that_plot_report_and_pareto_read(tmp_path):
    csv = tmp_path / "grad-tiny.csv"
    backends = "softmax,yoso:m=4,backward=pairs"
    args = ["error", *SMALL, "--mode", "fwdbwd", "--backends", backends, "--csv", csv]
    result = cli_runner.invoke(cli.app, [str(a) for a in args])
    assert result.exit_code == 0, result.output
    frame = pd.read_csv(csv)
    assert set(frame["mode"]) == {"fwdbwd"}
    assert {"grad_rel_dq_vs_softmax", "grad_noise_dv_vs_softmax"} <= set(frame["metric"])
    plot = cli_runner.invoke(cli.app, ["plot", str(csv), "-o", str(tmp_path / "g.png")])
    assert plot.exit_code == 0 and (tmp_path / "g.png").stat().st_size > 0, plot.output
    out = tmp_path / "results"
    report = cli_runner.invoke(cli.app, ["report", "--plots", str(tmp_path), "--out", str(out)])
    assert report.exit_code == 0, report.output
    text = (out / "yoso.md").read_text()
    assert "## grad-tiny" in text and "| dQ |" in text and "| rel. error |" in text


def test_pareto_reads_a_gradient_metric_against_the_fwdbwd_time():
    base = dict(study="time", metric="time_ms", status="ok", batch=1, heads=1, dim=8, seq=16,
                inputs="clustered", device="cpu", dtype="float32", p10=None, p90=None,
                std=0.0)  # fmt: skip
    times = pd.DataFrame(
        [dict(base, backend=b, mode=m, value=t) for b, m, t in
         [("a", "fwd", 1.0), ("a", "fwdbwd", 3.0), ("b", "fwd", 2.0), ("b", "fwdbwd", 5.0)]]
    )  # fmt: skip
    errors = pd.DataFrame(
        [dict(base, study="error", metric="grad_rel_dq_vs_softmax", mode="fwdbwd", backend=b,
              value=e) for b, e in [("a", 0.5), ("b", 0.1)]]
    )  # fmt: skip
    points = pareto_points(times, errors, metric="grad_rel_dq_vs_softmax").set_index("backend")
    assert points["time_ms"].to_dict() == {"a": 3.0, "b": 5.0}
    with pytest.raises(UsageError, match="no fwdbwd rows"):
        pareto_points(times[times["mode"] == "fwd"], errors, metric="grad_rel_dq_vs_softmax")
    with pytest.raises(UsageError, match="lower is closer"):
        pareto_points(times, errors, metric="grad_cos_dq_vs_softmax")
