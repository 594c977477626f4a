"""The error study's metrics as views read them: which are errors, where lower is closer.

`pareto` draws one of these against time and `compare` judges a change in any of them, so
both take the list from here (pareto imports matplotlib, which compare need not load).
A metric is `<name>_vs_<reference>`; a cosine or a captured mass, where higher is closer,
and a slope, which can be negative, are not errors in this sense.
"""

from __future__ import annotations

# lower is closer, with how an axis names them
LOWER_IS_BETTER = {
    "radian": "mean angle to",
    "rel_frobenius": "relative Frobenius error vs",
    "max_abs": "largest absolute error vs",
    "tv": "total variation distance of the map to",
}
GRADIENT_PREFIX = "grad_"  # the error study's gradient metrics (--mode fwdbwd)
GRADIENT_ERRORS = {
    "rel": "relative error of {} vs",
    "bias": "relative bias of {} vs",
    "noise": "one call's noise in {}, relative to",
}
LOWER_IS_BETTER |= {
    f"grad_{kind}_{g}": text.format(name)
    for g, name in {"dq": "dQ", "dk": "dK", "dv": "dV"}.items()
    for kind, text in GRADIENT_ERRORS.items()
}
# a stochastic backend's output bias and spread over seeds: lower is closer too, but only
# stochastic backends have them, so they are no axis for pareto, which sets all backends side
# by side
MONTE_CARLO = ("mc_bias", "mc_std")


def is_error(metric: str) -> bool:
    """Whether `metric` is an error where lower is closer (`LOWER_IS_BETTER` or a Monte
    Carlo bias or spread) against a named reference."""
    name, vs, reference = str(metric).partition("_vs_")
    return bool(vs and reference) and (name in LOWER_IS_BETTER or name in MONTE_CARLO)
