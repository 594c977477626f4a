"""How the report writes a number in a table cell, and what counts as no value."""

from __future__ import annotations

import pandas as pd


def number(value) -> str:
    """Three significant digits, no exponent for the values a study reports."""
    if missing(value):
        return "–"
    value = float(value)
    if value == 0:
        return "0"
    if abs(value) >= 100:
        return f"{value:.0f}"
    if abs(value) < 1e-3:
        return f"{value:.1e}"
    return f"{value:.3g}"


def missing(value) -> bool:
    if value is None or value is pd.NA:
        return True
    try:
        return bool(pd.isna(value))
    except (TypeError, ValueError):
        return False
