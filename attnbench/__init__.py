"""attnbench: benchmark and profile attention mechanisms.

>>> import attnbench
>>> out = attnbench.get_backend("yoso-32")(q, k, v)   # q, k, v: [batch, heads, n, d]
>>> rows = attnbench.time(seq="1k,4k", backends="sdpa,yoso-32")   # a pandas DataFrame

Each study of the command line is a call here with the command's options (`time`,
`profile`, `error`, `maps`, `model`, `train`, `compare`), returning its rows; a bad
option is a `UsageError` with the command's text.
"""

from attnbench.errors import UsageError

__all__ = [
    "Backend", "get_backend", "register", "UsageError",
    "time", "profile", "error", "maps", "model", "train", "compare",
]  # fmt: skip

# the module of `attnbench.api` each study's call lives in
_STUDIES = {
    "time": "time", "profile": "time", "error": "error", "maps": "maps", "model": "model",
    "train": "train", "compare": "compare",
}  # fmt: skip


def __getattr__(name: str):
    """The backends and studies (and torch with them) load on first use, so the command
    line starts fast."""
    import importlib

    if name in _STUDIES:
        return getattr(importlib.import_module(f"attnbench.api.{_STUDIES[name]}"), name)
    if name in ("Backend", "get_backend", "register"):
        from attnbench import backends

        return getattr(backends, name)
    raise AttributeError(f"module 'attnbench' has no attribute {name!r}")
