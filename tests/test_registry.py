import pytest

import attnbench
from attnbench.backends import registry
from attnbench.backends.registry import Backend, backend_classes, get_backend, parse_backends
from attnbench.errors import UsageError


def test_builtin_backends_are_listed():
    assert {"softmax", "sdpa", "yoso", "yoso-e"} <= set(backend_classes())


YOSO_DEFAULTS = ",hash=auto,resample=call,impl=numba,backward=proj,bound=256"


@pytest.mark.parametrize(
    "spec, canonical",
    [
        ("sdpa", "sdpa"),
        ("yoso", "yoso:m=32,tau=8,seed=0" + YOSO_DEFAULTS),
        ("yoso-16", "yoso:m=16,tau=8,seed=0" + YOSO_DEFAULTS),
        ("yoso:m=16,tau=10", "yoso:m=16,tau=10,seed=0" + YOSO_DEFAULTS),
        ("yoso-64:tau=auto,seed=3", "yoso:m=64,tau=auto,seed=3" + YOSO_DEFAULTS),
        ("yoso-e", "yoso-e:tau=8,backward=lower"),
        (" yoso-e:tau=12 ", "yoso-e:tau=12,backward=lower"),
    ],
)
def test_specs_name_every_parameter(spec, canonical):
    assert get_backend(spec).spec == canonical


@pytest.mark.parametrize(
    "spec, fragment",
    [
        (
            "nosuch",
            "sdpa, softmax, sparse-fixed, sparse-strided,",
        ),
        ("yoso:bogus=1", "valid: m, tau, seed, hash"),
        ("sdpa:m=1", "no parameter 'm'; valid: none"),
        ("yoso:tau=25", "1..24"),
        ("yoso:tau=0", "1..24"),
        ("yoso:m=0", "bad m"),
        ("yoso:m=x", "bad m"),
        ("yoso-x", "bad m"),
        ("yoso:m", "key=value"),
        ("softmax-3", "unknown backend"),
        ("yoso32", "did you mean 'yoso-32'"),
        ("nystromformr", "did you mean 'nystromformer'"),
        ("yoso:m=8,m=16", "m is set twice"),
        ("yoso-32:m=16", "m is set by the name 'yoso-32' and again"),
        ("yoso:tau=4,seed=1,tau=4", "tau is set twice"),
        ("", "empty"),
    ],
)
def test_bad_specs(spec, fragment):
    with pytest.raises(UsageError, match=fragment):
        get_backend(spec)


def test_parse_backends_keeps_parameter_commas():
    specs = [b.spec for b in parse_backends("softmax,yoso:m=16,tau=4,sdpa,yoso-e:tau=6")]
    assert specs == [
        "softmax",
        "yoso:m=16,tau=4,seed=0,hash=auto,resample=call,impl=numba,backward=proj,bound=256",
        "sdpa",
        "yoso-e:tau=6,backward=lower",
    ]
    with pytest.raises(UsageError, match="twice"):
        parse_backends("yoso-32,yoso")
    with pytest.raises(UsageError, match="empty item"):
        parse_backends("sdpa,,softmax")


def test_python_api_returns_a_callable():
    import torch

    q = k = v = torch.randn(1, 2, 8, 4)
    assert attnbench.get_backend("yoso-e")(q, k, v).shape == (1, 2, 8, 4)


class _EntryPoint:
    def __init__(self, name, obj):
        self.name, self._obj = name, obj

    def load(self):
        if isinstance(self._obj, Exception):
            raise self._obj
        return self._obj


def test_third_party_backends_register_through_entry_points(monkeypatch):
    class Mean(Backend):
        name = "toy-mean"
        summary = "average of all values"

        def forward(self, q, k, v, mask=None):
            return v.mean(-2, keepdim=True).expand_as(v)

    points = [_EntryPoint("toy", Mean), _EntryPoint("broken", ImportError("no module"))]
    monkeypatch.setattr(registry, "entry_points", lambda group: points)
    monkeypatch.setattr(registry, "_plugins_loaded", False)
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    with pytest.warns(UserWarning, match="broken"):
        assert "toy-mean" in backend_classes()
    assert get_backend("toy-mean").spec == "toy-mean"


def test_grid_reaches_only_spatial_backends_and_is_checked():
    import torch

    from attnbench.backends.registry import Backend, token_grid
    from attnbench.errors import UsageError

    class Spy(Backend):
        name = "spy"
        spatial = True

        def forward(self, q, k, v, mask=None, grid=None):
            return grid

    q = torch.zeros(1, 1, 12, 2)
    assert Spy()(q, q, q) == (1, 12)
    assert Spy()(q, q, q, grid=(3, 4)) == (3, 4)
    with pytest.raises(UsageError, match="grid 5x3 does not hold the sequence's 12 tokens"):
        Spy()(q, q, q, grid=(5, 3))
    assert get_backend("sdpa")(q, q, q, grid=(3, 4)).shape == q.shape  # ignored
    assert token_grid(None, 7) == (1, 7)
