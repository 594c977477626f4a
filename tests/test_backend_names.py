"""A bad backend name is reported before torch loads (`attnbench.backends.names`): the
torch-free table is the registry's, and the check raises the full parse's texts."""

import importlib
import json
import pkgutil
import pprint
import subprocess
import sys

import pytest

from attnbench.backends import names, registry
from attnbench.backends.names import check_backend_names, check_backend_spec
from attnbench.errors import UsageError

HEAVY = ("torch", "numpy", "numba", "pandas", "attnbench.backends.registry")


@pytest.fixture
def torch_free(monkeypatch):
    """The check as a process that has not loaded the registry runs it (the command line
    before any study): from `names.BACKENDS` alone. The registry module stays usable here
    for the full parse to compare with."""
    registry.backend_classes()
    monkeypatch.delitem(sys.modules, "attnbench.backends.registry")


def builtin_table() -> dict:
    """The registry's built-in backends as `names.BACKENDS` writes them."""
    return {
        name: (cls.shorthand, {key: param.rule for key, param in cls.params.items()})
        for name, cls in registry.backend_classes().items()
        if cls.__module__.startswith("attnbench.backends.")
    }


def full_parse_error(text: str, parse=registry.parse_backends) -> str:
    with pytest.raises(UsageError) as caught:
        parse(text)
    return str(caught.value)


def test_the_torch_free_table_is_the_registrys():
    """A backend, parameter or rule added to the registry and not to names.BACKENDS (or the
    other way) fails here; the message is the table to write."""
    import attnbench.backends as package

    for module in pkgutil.iter_modules(package.__path__):  # a module MODULES misses, too
        importlib.import_module(f"attnbench.backends.{module.name}")
    table = builtin_table()
    assert names.BACKENDS == table, "names.BACKENDS:\n" + pprint.pformat(table, sort_dicts=False)
    assert list(names.KNOWN) == sorted(table)
    in_order = {name: list(params) for name, (_, params) in names.BACKENDS.items()}
    assert in_order == {name: list(params) for name, (_, params) in table.items()}  # "valid: ..."
    modules = {
        cls.__module__.rpartition(".")[2]
        for cls in registry.backend_classes().values()
        if cls.__module__.startswith("attnbench.backends.")
    }
    assert set(names.MODULES) == modules


def test_every_listed_backend_passes_the_check(torch_free):
    """Each backend `attnbench backends` lists, by its name, its shorthand and each of its
    parameters at the default, passes wherever the registry takes it."""
    from attnbench.cli.backends import backend_listing

    listed = [row["name"] for row in backend_listing()]
    assert set(listed) == set(names.BACKENDS)
    specs = []
    for name in listed:
        cls = registry.backend_classes()[name]
        specs.append(name)
        if cls.shorthand:
            specs.append(f"{name}-{cls.params[cls.shorthand].default}")
        specs += [f"{name}:{key}={param.default}" for key, param in cls.params.items()]
    taken = []
    for spec in specs:
        try:
            registry.get_backend(spec)
        except UsageError:
            continue
        taken.append(spec)
        check_backend_spec(spec)
        check_backend_names(spec)
    assert len(taken) > 60
    check_backend_names(",".join(listed))
    check_backend_names("softmax,yoso:m=16,tau=auto,sdpa,scram:kappa=4,b=1,variant=mode,L=8")


BAD = [
    "nosuch",
    "yoso32",
    "nystromformr",
    "softmax-3",
    "Softmax",
    "yoso:bogus=1",
    "sdpa:m=1",
    "yoso:m",
    "yoso:m=8,m=16",
    "yoso-32:m=16",
    "sdpa,,softmax",
    ",sdpa",
    "softmax,nosuch",
    "yoso-32,nosuch",
    "yoso:m=16,tau=4,performr",
    "yoso:m=0,nosuch",
    "yoso-x",
    "yoso:tau=25",
    "linformer:share=all",
    "performer-128:resample=never",
    "scram:kappa=99",
    "scram:kappa=4,L=8,nosuch=1",
]


@pytest.mark.parametrize("text", BAD)
def test_errors_are_the_full_parses(torch_free, text):
    expected = full_parse_error(text)
    with pytest.raises(UsageError) as caught:
        check_backend_names(text)
    assert str(caught.value) == expected


@pytest.mark.parametrize("spec", ["nosuch", "sdpa,softmax", "", "  ", "yoso:m=0", "yoso-32:x=1"])
def test_baseline_errors_are_get_backends(torch_free, spec):
    expected = full_parse_error(spec, registry.get_backend)
    with pytest.raises(UsageError) as caught:
        check_backend_spec(spec)
    assert str(caught.value) == expected


@pytest.mark.parametrize(
    "text",
    [
        "scram:variant=mode,nosuch",  # variant: scram's own parser, read first
        "yoso-e:backward=bad,tau=99",
        "nystromformer:conv=2,nosuch",
        "yoso-32,yoso:m=32",  # listed twice: known from the parsed values alone
    ],
)
def test_what_only_the_backends_know_is_left_to_the_full_parse(torch_free, text):
    full_parse_error(text)
    check_backend_names(text)


def test_backends_registered_at_run_time_are_the_registrys(monkeypatch):
    registry.backend_classes()
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))

    @registry.register
    class Toy(registry.Backend):
        name = "toy-names"
        params = {"w": registry.int_param(2)}

    check_backend_names("toy-names:w=3,sdpa")
    for text in ("toy-names:v=1", "toy-name", "toy-names:w=0"):
        expected = full_parse_error(text)
        with pytest.raises(UsageError) as caught:
            check_backend_names(text)
        assert str(caught.value) == expected


def test_a_package_registering_backends_leaves_unknown_names_to_the_registry(
    torch_free, monkeypatch
):
    monkeypatch.setattr(names, "entry_points", lambda group: ["a plugin"])
    check_backend_names("toy-plugin")
    monkeypatch.setattr(names, "entry_points", lambda group: [])
    with pytest.raises(UsageError, match="unknown backend 'toy-plugin'"):
        check_backend_names("toy-plugin")


SCRIPT = """
import json, sys
from attnbench.cli import app
try:
    app(sys.argv[1:])
except SystemExit as exc:
    code = exc.code
print(json.dumps({"code": code, "loaded": [m for m in %r if m in sys.modules]}))
"""


@pytest.mark.parametrize(
    "args, spec",
    [(["--backends", "softmax,nosuch"], "nosuch"), (["--baseline", "sdpa2"], "sdpa2")],
)
def test_the_command_reports_a_bad_name_without_torch(args, spec):
    """`attnbench time --backends nosuch` took seconds: the registry imported torch and
    every backend before it knew the names."""
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT % (HEAVY,), "time", *args],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    result = json.loads(done.stdout.splitlines()[-1])
    assert result == {"code": 2, "loaded": []}, done.stderr
    assert done.stderr.strip() == "error: " + full_parse_error(spec, registry.get_backend)
