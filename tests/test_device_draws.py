"""Draws of `resample=call` backends (YOSO, Performer, Reformer): reproducible per (seed,
call) on one device, unchanged on the CPU, and made on the device itself, so a timed GPU
call copies nothing from the host."""

import pytest
import torch
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode

from attnbench import get_backend
from attnbench.backends.performer import orthogonal_gaussian
from attnbench.kernels.lsh import dispatch, reference

RESAMPLED = [
    "yoso:m=4,tau=3,hash=fast",
    "yoso:m=4,tau=3,hash=gaussian",
    "yoso:m=4,tau=3,impl=torch",
    "performer:features=8",
    "reformer:hashes=2,bucket=4",
]


def _qkv(n=16, d=8, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(1, 2, n, d, generator=gen) for _ in range(3)]


@pytest.mark.parametrize("spec", RESAMPLED)
def test_a_seeded_resample_call_run_gives_identical_numbers_twice(spec):
    """Two fresh instances with the same seed, three calls each: call for call the same
    outputs bit for bit, and new draws on each call (call 0 differs from call 1)."""
    q, k, v = _qkv()
    runs = []
    for _ in range(2):
        backend = get_backend(f"{spec},seed=5,resample=call")
        runs.append([backend(q, k, v) for _ in range(3)])
    for a, b in zip(*runs, strict=True):
        assert torch.equal(a, b)
    assert not torch.equal(runs[0][0], runs[0][1])


def test_cpu_draws_are_the_seeded_cpu_generator_s_as_before():
    """Committed CPU results depend on these streams: a CPU generator seeded with the seed."""
    gen = torch.Generator().manual_seed(9)
    assert torch.equal(
        reference.gaussian_projections(2, 5, 3, 4, 9), torch.randn(2, 5, 12, generator=gen)
    )
    gen = torch.Generator().manual_seed(9)
    bits = torch.randint(0, 2, (2, 1, 3, 8), generator=gen)
    assert torch.equal(reference.fast_diagonals(2, 5, 2, 4, 9), (2 * bits - 1).float())
    gen = torch.Generator().manual_seed(4)
    q, r = torch.linalg.qr(torch.randn(6, 6, generator=gen, dtype=torch.float64))
    rows = (q * torch.sign(torch.diagonal(r))).T
    torch.testing.assert_close(orthogonal_gaussian(6, 6, 4, scale=False), rows, rtol=0, atol=0)


class HostCopies(TorchDispatchMode):
    """Records each op that would move data between the host and a device: one whose
    tensors (0-dim scalars on the CPU aside) or target `device` are on the CPU and on
    another device. Recorded before the op runs, so an op that then fails is seen too."""

    def __init__(self):
        super().__init__()
        self.ops: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        devices = {
            t.device.type
            for t in pytree.tree_leaves((args, kwargs))
            if isinstance(t, torch.Tensor) and (t.dim() > 0 or t.device.type != "cpu")
        }
        if kwargs.get("device") is not None:
            devices.add(torch.device(kwargs["device"]).type)
        if len(devices) > 1:
            self.ops.append(str(func))
        return func(*args, **kwargs)


class _NoGenerator:
    """The stand-in device has no generator: seeding one gives None, and torch draws
    without it."""

    def __init__(self, device="cpu"):
        pass

    def manual_seed(self, seed):
        return None


@pytest.fixture
def device(monkeypatch):
    """A device that is not the host, with no GPU: torch's "meta" device (shapes, dtypes
    and devices, no data) stands in for CUDA; the numba kernels are those of a GPU
    (`kernel_target`), their launches replaced by a recorder of the devices of the tensors
    they are handed."""
    real = torch.Generator

    class Generator(real):  # a class, as torch's own annotations use it
        def __new__(cls, device="cpu"):
            return real(device) if torch.device(device).type == "cpu" else _NoGenerator()

    monkeypatch.setattr(torch, "Generator", Generator)
    launched: list[set] = []

    class Kernels:
        def __getattr__(self, name):
            def launch(*args):
                launched.append({a.device.type for a in args if isinstance(a, torch.Tensor)})

            return launch

    monkeypatch.setattr(dispatch, "kernel_target", lambda tensor: "cuda")
    monkeypatch.setattr(dispatch, "_kernels", lambda target: Kernels())
    monkeypatch.setattr(dispatch, "as_array", lambda tensor: tensor)
    return launched


# impl=torch draws as impl=numba does.
@pytest.mark.parametrize("spec", [s for s in RESAMPLED if "impl=torch" not in s])
def test_a_timed_device_call_copies_nothing_from_the_host(spec, device):
    """What this shows: on a device that is not the host (torch's meta device standing in
    for a GPU), a forward after the first, drawing anew with resample=call as every timed
    call does, runs no op that mixes host and device tensors (so makes no host-to-device
    copy), and every tensor handed to a numba launch is on the device. What it cannot
    show: what a real GPU does; `attnbench selftest --device cuda` runs the kernels there."""
    q, k, v = (torch.randn(1, 2, 16, 8, device="meta") for _ in range(3))
    backend = get_backend(f"{spec},resample=call")
    backend(q, k, v)  # the first call: built once, outside any timing
    device.clear()
    with HostCopies() as copies:
        out = backend(q, k, v)
    assert out.device.type == "meta"
    assert copies.ops == []
    assert all(devices == {"meta"} for devices in device)
    if spec.startswith("yoso"):
        assert device, "the numba launches were not reached"


def test_the_recorder_sees_a_host_to_device_copy(device):
    """The check above can fail: drawing on the host and copying, as the draws once did."""
    with HostCopies() as copies:
        torch.randn(4, 4).to("meta")
    assert copies.ops == ["aten._to_copy.default"]
