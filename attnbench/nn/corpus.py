"""The text the masked language model learns from and is read on, shipped with Python.

Python's reference documentation (the `help()` topics in the standard library's
`pydoc_data`, topics in order) is split once: its last HELD_OUT share is held out, never
trained on, and is what evaluation and `--inputs model:yoso-mlm` read. Training reads the
rest of it and the source of the standard library's top-level modules, file names in order.
Everything is bytes of UTF-8.
"""

from __future__ import annotations

import sysconfig
from pathlib import Path

HELD_OUT = 0.1


def english_text() -> str:
    """Python's reference documentation as shipped in the standard library, topics in order."""
    from pydoc_data.topics import topics

    return "\n\n".join(topics[key] for key in sorted(topics))


def _split() -> int:
    return int(len(english_text().encode()) * (1 - HELD_OUT))


def held_out_bytes() -> bytes:
    """The documentation's last HELD_OUT share."""
    return english_text().encode()[_split() :]


def training_bytes() -> bytes:
    """The documentation before the held-out part, then the standard library's top-level
    modules' source."""
    docs = english_text().encode()[: _split()]
    folder = Path(sysconfig.get_paths()["stdlib"])
    sources = [path.read_bytes() for path in sorted(folder.glob("*.py"))]
    return b"\n\n".join([docs, *sources])
