"""`attnbench backends`: what can be benchmarked.

The listing is cached per installed state (attnbench's backend sources and the backends
other packages register), so the command answers without importing torch once it has run.
"""

import hashlib
import importlib.metadata
import json
import os
from pathlib import Path

from attnbench.backends.names import ENTRY_POINT_GROUP
from attnbench.cli import core


@core.app.command()
def backends() -> None:
    """List the backends, their parameters and defaults, cost, devices and backward support."""
    from attnbench.views.listing import backends_table

    core.console.print(backends_table(backend_listing()))


def backend_listing() -> list[dict]:
    """Each backend as the table shows it: from the cache if it matches what is installed,
    else read from the backend classes (importing them) and cached."""
    from attnbench.measure.ceilings import cache_dir

    path = cache_dir() / f"backends-{_installed_state()}.json"
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        pass
    from attnbench.backends import backend_classes

    listing = [describe(name, cls) for name, cls in backend_classes().items()]
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(listing))
        os.replace(tmp, path)
    except OSError:  # a cache that cannot be written is no error
        pass
    return listing


def describe(name: str, cls) -> dict:
    """What the listing shows of one backend class."""
    params = ", ".join(f"{k}={p.default}" for k, p in cls.params.items()) or "none"
    if cls.shorthand:
        params += f" ({name}-N sets {cls.shorthand})"
    return {
        "name": name,
        "summary": cls.summary,
        "params": params,
        "complexity": cls.complexity,
        "devices": list(cls.devices),
        "backward": bool(cls.backward),
    }


def _installed_state() -> str:
    """A hash of what the listing depends on: the backend modules' files (size and time)
    and the entry points other packages register backends under, with their versions."""
    folder = Path(__file__).resolve().parents[1] / "backends"
    parts = [
        f"{p.name}:{p.stat().st_size}:{p.stat().st_mtime_ns}" for p in sorted(folder.glob("*.py"))
    ]
    parts += sorted(
        f"{ep.name}={ep.value}@{getattr(ep.dist, 'version', '')}"
        for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)
    )
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]
