"""Backend specs as people read them: the one place a view turns a spec into a label.

A row names its backend by canonical spec ("yoso:m=32,tau=8,seed=0,..."); every table and
figure shows the registry's short label ("yoso-32") instead, or the spec itself when it no
longer parses (a backend renamed or a plugin not installed), so old files still display.
"""

from __future__ import annotations

from functools import cache


@cache
def backend_label(spec: str) -> str:
    """The registry's short label ("yoso-32" for the canonical yoso spec), else the spec."""
    from attnbench.backends import get_backend  # imports torch: only when a label is drawn

    try:
        return get_backend(spec).label
    except ValueError:  # UsageError included: an unknown name or a bad parameter
        return spec


def parse_spec(spec: str) -> tuple[str, dict[str, str]]:
    """Split "yoso:m=32,tau=8" into ("yoso", {"m": "32", "tau": "8"})."""
    name, _, rest = spec.partition(":")
    params = {}
    for part in filter(None, rest.split(",")):
        key, _, value = part.partition("=")
        params[key.strip()] = value.strip()
    return name, params


def m_of(spec: str) -> float | None:
    """The spec's m as a number, so m=8 sorts before m=16; None when it has no m."""
    m = parse_spec(spec)[1].get("m")
    try:
        return float(m) if m is not None else None
    except ValueError:
        return None


def short_labels(specs: list[str]) -> tuple[dict[str, str], str | None]:
    """Label backends "m=8" when several differ only in m; return labels and a legend title.

    Shortening is only safe when every spec with an m shares the family and all other
    parameters; the legend title then spells out what "m=..." stands for.
    """
    labels = {s: backend_label(s) for s in specs}
    with_m = [s for s in specs if m_of(s) is not None]
    parsed = [parse_spec(s) for s in with_m]
    rests = {(name, tuple(sorted((k, v) for k, v in p.items() if k != "m"))) for name, p in parsed}
    if len(with_m) < 2 or len(rests) != 1 or len({p["m"] for _, p in parsed}) != len(with_m):
        return labels, None
    for spec, (_, params) in zip(with_m, parsed, strict=True):
        labels[spec] = f"m={params['m']}"
    name, params = parsed[0]
    pattern = ",".join(f"{k}=…" if k == "m" else f"{k}={v}" for k, v in params.items())
    return labels, f"m=… stands for {name}:{pattern}"


def backend_order(specs) -> list[str]:
    """Backends with an m sorted by m first, then the rest by name."""

    def key(spec: str):
        m = m_of(spec)
        return (m is None, m if m is not None else 0.0, spec)

    return sorted(set(specs), key=key)
