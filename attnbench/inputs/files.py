"""Inputs read from a file: q, k and v arrays in a .npz or .pt, cut to the first n tokens.

The file sets batch, heads and dim (the options given are ignored) and holds at most its
own number of tokens. It is read once, when the source is built, and checked then, so a
bad file is a one-line error before any work.
"""

from __future__ import annotations

import pickle
import warnings
import zipfile
from pathlib import Path

import numpy as np
import torch

from attnbench.errors import UsageError
from attnbench.inputs.base import Source

FILE_SUFFIXES = (".npz", ".pt")


def load_qkv(path: Path) -> list[torch.Tensor]:
    """Read q, k, v from .npz or .pt; accept [n, d], [H, n, d] or [B, H, n, d]; validate."""
    path = Path(path)
    if not path.is_file():
        raise UsageError(f"--inputs: file {path} does not exist")
    try:
        raw = _read_npz(path) if path.suffix == ".npz" else _read_pt(path)
    except pickle.UnpicklingError:
        if not zipfile.is_zipfile(path):  # torch.save writes a zip: this is not its file
            raise UsageError(f"--inputs: {path} is not a file torch.save wrote") from None
        raise UsageError(
            f"--inputs: {path} holds objects other than tensors, which could run code on "
            "loading; save plain tensors (torch.save({'q': q, 'k': k, 'v': v}, path))"
        ) from None
    except UsageError:
        raise
    except Exception as exc:  # noqa: BLE001 - any unreadable file is the user's to fix
        detail = " ".join(str(exc).split())[:200]  # one line, whatever the reader wrote
        raise UsageError(f"--inputs: cannot read {path}: {detail}") from None
    if not isinstance(raw, dict) or any(key not in raw for key in "qkv"):
        raise UsageError(f"--inputs: {path} must hold arrays named q, k and v")
    tensors = [_checked(raw[key], key, path) for key in "qkv"]
    q, k, v = tensors
    if q.shape != k.shape or k.shape[:3] != v.shape[:3]:
        raise UsageError(
            f"--inputs: mismatched shapes in {path}: q {tuple(q.shape)}, k {tuple(k.shape)}, "
            f"v {tuple(v.shape)} (q and k must match; v must share batch, heads and n)"
        )
    return tensors


def _read_npz(path: Path) -> dict:
    """The arrays of a .npz, without pickled objects; byte order made native, as torch
    takes only that (a big-endian file is as valid as any)."""
    if not zipfile.is_zipfile(path):  # else numpy reads it as a pickle and says so
        raise UsageError(f"--inputs: {path} is not a .npz archive (numpy.savez writes one)")
    raw = {}
    with np.load(path, allow_pickle=False) as data:
        for key in data.files:
            try:
                array = data[key]
            except ValueError:  # object arrays: numpy's advice is to load them unsafely
                raise UsageError(
                    f"--inputs: {key} in {path} holds Python objects; save numeric arrays"
                ) from None
            if not isinstance(array, np.ndarray):  # a zip member that is no .npy
                raise UsageError(f"--inputs: {path} is a zip but not a .npz (numpy.savez)")
            raw[key] = array.astype(array.dtype.newbyteorder("="), copy=False)
    return raw


def _read_pt(path: Path):
    with warnings.catch_warnings():  # the error below says all; no warning first
        warnings.simplefilter("ignore")
        return torch.load(path, map_location="cpu", weights_only=True)


def _checked(value, key: str, path: Path) -> torch.Tensor:
    """One of q, k, v as a dense, finite, floating-point [B, H, n, d] tensor."""
    if isinstance(value, np.ndarray) and value.dtype.kind not in "biufc":
        raise UsageError(f"--inputs: {key} in {path} is not a numeric array ({value.dtype})")
    try:
        t = torch.as_tensor(value)
    except (TypeError, ValueError, RuntimeError):
        raise UsageError(f"--inputs: {key} in {path} is not a numeric array") from None
    if t.is_meta:
        raise UsageError(f"--inputs: {key} in {path} is a meta tensor, which holds no data")
    if t.is_nested or t.layout != torch.strided:
        layout = "nested" if t.is_nested else str(t.layout).removeprefix("torch.")
        raise UsageError(f"--inputs: {key} in {path} is a {layout} tensor; save it dense")
    if not t.is_floating_point():
        raise UsageError(f"--inputs: {key} in {path} is not a floating-point array")
    if t.dim() not in (2, 3, 4):
        raise UsageError(f"--inputs: {key} in {path} has {t.dim()} dims; want 2, 3 or 4")
    if t.numel() == 0:
        raise UsageError(f"--inputs: {key} in {path} is empty, shape {tuple(t.shape)}")
    while t.dim() < 4:
        t = t.unsqueeze(0)
    if not torch.isfinite(t).all():
        raise UsageError(f"--inputs: {key} in {path} contains NaN or inf")
    return t


class FileInputs(Source):
    """A .npz or .pt path (any text with one of FILE_SUFFIXES): the file's q, k and v."""

    fixed_shape = True

    def __init__(self, kind: str, batch: int, heads: int, dim: int):
        tensors = load_qkv(Path(kind))
        batch, heads, self.max_n, dim = tensors[0].shape
        super().__init__(kind, batch, heads, dim)
        self.tensors = tensors

    @classmethod
    def matches(cls, text: str) -> bool:
        return Path(text).suffix in FILE_SUFFIXES

    @property
    def label(self) -> str:
        return Path(self.kind).name

    def check_lengths(self, seqs: list[int], option: str = "--seq") -> None:
        if max(seqs) > self.max_n:
            raise UsageError(
                f"{option}: {max(seqs)} is longer than the {self.max_n} tokens in {self.label}"
            )

    def draw(self, n, seed, grid):
        return [t[:, :, :n] for t in self.tensors]
