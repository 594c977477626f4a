"""What the commands that read result files share: the rows of a file, and the environment
record written beside it."""

from __future__ import annotations

from pathlib import Path

from attnbench.errors import UsageError


def read_results(path: Path):
    """The rows of a result file; UsageError naming the file if it cannot be read."""
    from attnbench.results.read import read_rows

    try:
        return read_rows(path)
    except (ValueError, KeyError, OSError) as exc:
        raise UsageError(f"{path}: cannot read results ({exc})") from None


def run_env(results: Path) -> dict | None:
    """The environment record of a result file: a CSV's .env.json sidecar, a JSON's "env"."""
    import json

    from attnbench.results.paths import env_sidecar

    try:
        if results.suffix.lower() == ".json":
            return json.loads(results.read_text()).get("env")
        sidecar = env_sidecar(results)
        return json.loads(sidecar.read_text()) if sidecar.is_file() else None
    except (OSError, ValueError, AttributeError):  # no usable record: the rows alone
        return None
