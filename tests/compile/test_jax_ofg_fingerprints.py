"""Fingerprints: they change with everything a traced program depends on, and only then.

Each test edits one thing a wrapped function depends on (a global, a helper
in another module, a closure, a default, a library version, the JAX
configuration) and checks the fingerprint changes; or edits something it does
not read and checks it stays. Values that cannot be described faithfully must
give None, never a key that could be stale.
"""

import dataclasses
import importlib
import json
import os
import sqlite3
import sys
import textwrap
import threading
import weakref
import zlib

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _fake_distributions import install_distribution
from _fresh_process import run_script

import pytensor.tensor as pt
from pytensor.compile._jax_ofg.cache.code_origin import module_kind
from pytensor.compile._jax_ofg.cache.environment import environment_fingerprint
from pytensor.compile._jax_ofg.cache.fingerprints import (
    Undescribable,
    describe,
    describe_or_raise,
    digest,
    fingerprint,
)
from pytensor.compile._jax_ofg.tracing.functions import INPUT, FlatJaxFunction, Static
from pytensor.compile.jax_ofg import OpFromJax, as_jax_op
from pytensor.tensor.type import TensorType


def namespace(source: str, name: str = "user_namespace") -> dict:
    """Run ``source`` as the body of a user module called ``name``; its globals."""
    globals_ = {"__name__": name}
    exec(textwrap.dedent(source), globals_)
    return globals_


@pytest.fixture
def user_modules(tmp_path, monkeypatch):
    """Write modules into a folder on ``sys.path``; import (or reload) them."""
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    written = []

    def write(name: str, source: str):
        (tmp_path / f"{name}.py").write_text(textwrap.dedent(source))
        importlib.invalidate_caches()
        written.append(name)
        if name in sys.modules:
            return importlib.reload(sys.modules[name])
        return importlib.import_module(name)

    yield write
    for name in written:
        sys.modules.pop(name, None)


# ------------------------------------------------------------------- values
def test_scalars_are_exact():
    keys = [describe(v) for v in (1, 1.0, True, np.float64(1.0), np.int64(1), 1 + 0j)]
    assert len(set(keys)) == len(keys)
    assert describe(0.1) != describe(0.1 + 1e-17 * 2)  # differ in the last bit
    assert describe(-0.0) != describe(0.0)


def test_arrays_by_dtype_shape_and_content():
    a = np.arange(4.0)
    assert fingerprint(a) == fingerprint(a.copy())
    assert fingerprint(a) != fingerprint(a.astype(np.float32))
    assert fingerprint(a) != fingerprint(a.reshape(2, 2))
    b = a.copy()
    b[3] = 5.0
    assert fingerprint(a) != fingerprint(b)
    assert fingerprint(jnp.asarray(a)) == fingerprint(jnp.asarray(a))
    # a weakly typed JAX scalar promotes differently: it is another program
    assert fingerprint(jnp.asarray(1.0)) != fingerprint(
        jnp.asarray(1.0, dtype=jnp.asarray(1.0).dtype)
    )


def test_containers():
    assert describe({"a": 1, "b": 2}) != describe(
        {"b": 2, "a": 1}
    )  # order is observable
    assert describe({1, 2, 3}) == describe({3, 2, 1})
    assert describe((1,)) != describe([1])
    cycle: list = [1]
    cycle.append(cycle)
    assert describe(cycle) == "[1, @0]"


class _Scaled:
    __slots__ = ("__scale", "offset")

    def __init__(self, scale, offset):
        self.__scale, self.offset = scale, offset

    def __call__(self, x):
        return self.__scale * x + self.offset


def test_instances_by_every_slot_private_ones_too():
    """A private slot (stored under its mangled name) is part of the state."""
    assert describe(_Scaled(2.0, 1.0)) == describe(_Scaled(2.0, 1.0))
    assert describe(_Scaled(2.0, 1.0)) != describe(_Scaled(3.0, 1.0))
    assert describe(_Scaled(2.0, 1.0)) != describe(_Scaled(2.0, 0.0))


# ---------------------------------------------------------------- functions
def test_a_global_the_function_reads():  # (a) and (j)
    ns = namespace(
        """
        SCALE = 2.0
        UNRELATED = 1
        def f(x):
            return SCALE * x
        """
    )
    before = fingerprint(ns["f"])
    assert before is not None
    ns["UNRELATED"] = 2  # not read by f: equal
    assert fingerprint(ns["f"]) == before
    ns["SCALE"] = 3.0
    assert fingerprint(ns["f"]) != before
    ns["SCALE"] = 2.0
    assert fingerprint(ns["f"]) == before


def test_a_global_read_only_in_a_nested_lambda():  # (e)
    ns = namespace(
        """
        FACTOR = 2.0
        def f(x):
            g = lambda y: FACTOR * y
            return g(x)
        """
    )
    before = fingerprint(ns["f"])
    ns["FACTOR"] = 2.5
    assert fingerprint(ns["f"]) != before


def test_a_closure_holding_another_array():  # (c)
    def make(values):
        def f(x):
            return x * values

        return f

    assert fingerprint(make(np.ones(3))) == fingerprint(make(np.ones(3)))
    assert fingerprint(make(np.ones(3))) != fingerprint(make(np.zeros(3)))


def test_default_and_keyword_default_arguments():  # (d)
    ns = namespace(
        """
        def f(x, k=2.0, *, m=1):
            return k * x + m
        """
    )
    f = ns["f"]
    before = fingerprint(f)
    f.__defaults__ = (3.0,)
    assert fingerprint(f) != before
    f.__defaults__ = (2.0,)
    assert fingerprint(f) == before
    f.__kwdefaults__ = {"m": 2}
    assert fingerprint(f) != before


def test_code_edits_change_the_fingerprint():
    one = namespace("def f(x):\n    return x + 1\n")["f"]
    two = namespace("def f(x):\n    return x - 1\n")["f"]  # only bytecode differs
    same = namespace("\n\ndef f(x):\n    return x + 1\n")["f"]  # other line numbers
    assert fingerprint(one) != fingerprint(two)
    assert fingerprint(one) == fingerprint(same)


def test_recursive_functions_are_named_not_followed():
    ns = namespace(
        """
        def countdown(n):
            return 0 if n == 0 else countdown(n - 1)
        def outer():
            def inner(n):
                return 0 if n == 0 else inner(n - 1)
            return inner
        """
    )
    assert "globals={countdown=@0}" in describe(ns["countdown"])
    assert "closure=(@0)" in describe(ns["outer"]())
    assert describe(ns["outer"]()) == describe(ns["outer"]())


# -------------------------------------------------------------- user modules
def test_a_helper_in_another_module_is_followed(user_modules):  # (b)
    user_modules("fp_rates", "def rate(x):\n    return 2.0 * x\n")
    user_modules(
        "fp_helpers", "import fp_rates\ndef rhs(x):\n    return fp_rates.rate(x)\n"
    )
    main = user_modules(
        "fp_main",
        """
        import fp_helpers
        from fp_helpers import rhs
        def by_attribute(x):
            return fp_helpers.rhs(x)
        def by_name(x):
            return rhs(x)
        def by_local_import(x):
            import fp_helpers as h
            return h.rhs(x)
        """,
    )
    functions = [main.by_attribute, main.by_name, main.by_local_import]
    before = [fingerprint(f) for f in functions]
    assert None not in before
    # a helper's helper, two modules away, is edited
    user_modules("fp_rates", "def rate(x):\n    return 3.0 * x\n")
    after = [fingerprint(f) for f in functions]
    assert all(b != a for b, a in zip(before, after))


def test_an_attribute_of_a_user_module(user_modules):  # (f)
    config = user_modules("fp_config", "SCALE = 2.0\nUNUSED = 1\n")
    main = user_modules(
        "fp_reader", "import fp_config\ndef f(x):\n    return fp_config.SCALE * x\n"
    )
    before = fingerprint(main.f)
    config.UNUSED = 5  # not an attribute the code names: equal
    assert fingerprint(main.f) == before
    config.SCALE = 4.0
    assert fingerprint(main.f) != before
    assert module_kind("fp_config") == ("user", "")


def test_equal_in_fresh_processes_until_a_helper_changes(tmp_path):  # (i) and (b)
    (tmp_path / "helpers.py").write_text("def rhs(t, y, args):\n    return -y\n")
    script = """
        import json
        import diffrax
        import jax.numpy as jnp
        from pytensor.compile._jax_ofg.cache.environment import environment_fingerprint
        from pytensor.compile._jax_ofg.cache.fingerprints import fingerprint
        import helpers

        TS = jnp.linspace(0.0, 1.0, 5)

        def solve(y0):
            return diffrax.diffeqsolve(
                diffrax.ODETerm(helpers.rhs), diffrax.Tsit5(), 0.0, 1.0, 0.1, y0,
                saveat=diffrax.SaveAt(ts=TS),
                stepsize_controller=diffrax.PIDController(rtol=1e-6, atol=1e-6),
            ).ys

        print(json.dumps([fingerprint(solve), environment_fingerprint()]))
    """

    def run() -> list:
        result = run_script(script, tmp_path, timeout=300)
        return json.loads(result.stdout.strip().splitlines()[-1])

    first, second = run(), run()
    assert first[0] is not None
    assert first == second
    (tmp_path / "helpers.py").write_text("def rhs(t, y, args):\n    return -2 * y\n")
    third = run()
    assert third[0] != first[0]
    assert third[1] == first[1]


# ----------------------------------------------------------------- libraries
FAKELIB = "def scale(x):\n    return 2.0 * x\n"


def test_a_library_is_described_by_its_version(tmp_path):  # (g)
    site, work = tmp_path / "site", tmp_path / "work"
    work.mkdir()
    script = f"""
        import json, sys
        sys.path.insert(0, {str(site)!r})
        import fakelib
        from pytensor.compile._jax_ofg.cache.code_origin import module_kind
        from pytensor.compile._jax_ofg.cache.fingerprints import fingerprint

        def f(x):
            return fakelib.scale(x)

        print(json.dumps([fingerprint(f), module_kind("fakelib")]))
    """

    def run() -> list:
        result = run_script(script, work, timeout=300)
        return json.loads(result.stdout.strip().splitlines()[-1])

    install_distribution(site, "fakelib", "1.0", FAKELIB)
    old = run()
    assert old[1] == ["library", "fakelib==1.0"]
    install_distribution(site, "fakelib", "1.1", FAKELIB)
    new = run()
    assert new[1] == ["library", "fakelib==1.1"]
    assert new[0] != old[0]
    # Installed from a local folder, its version proves nothing: it is followed.
    install_distribution(site, "fakelib", "1.1", FAKELIB, local=True)
    local = run()
    assert local[1] == ["user", ""]
    (site / "fakelib" / "__init__.py").write_text("def scale(x):\n    return 3.0 * x\n")
    assert run()[0] != local[0]


def test_library_objects():
    assert module_kind("diffrax")[1].startswith("diffrax==")
    assert module_kind("json") == ("stdlib", "")
    solver = describe(diffrax.Tsit5())
    assert solver is not None and "diffrax==" in solver
    assert describe(np.sin) is not None
    assert describe(jax.nn.relu) is not None
    controller = diffrax.PIDController(rtol=1e-6, atol=1e-6)
    assert fingerprint(controller) != fingerprint(
        diffrax.PIDController(rtol=1e-7, atol=1e-6)
    )


def test_library_wrappers_of_user_functions_are_followed():
    ns = namespace("K = 2.0\ndef f(x):\n    return K * x\n")
    wrappers = [
        lambda: jax.jit(ns["f"]),
        lambda: jax.vmap(ns["f"]),
        lambda: jax.custom_jvp(ns["f"]),
        lambda: diffrax.ODETerm(ns["f"]),
        lambda: eqx.filter_jit(ns["f"]),
    ]
    before = [fingerprint(w()) for w in wrappers]
    assert None not in before
    ns["K"] = 3.0
    after = [fingerprint(w()) for w in wrappers]
    assert all(b != a for b, a in zip(before, after))


def test_user_equinox_modules_by_fields_and_methods():
    source = """
        import equinox as eqx
        import jax
        class Scale(eqx.Module):
            w: jax.Array
            k: int = eqx.field(static=True, default=2)
            def __call__(self, x):
                return self.w * x * {}
    """
    one = namespace(source.format("self.k"))["Scale"]
    two = namespace(source.format("(self.k + 1)"))["Scale"]
    assert fingerprint(one(jnp.ones(2))) == fingerprint(one(jnp.ones(2)))
    assert fingerprint(one(jnp.ones(2))) != fingerprint(one(jnp.zeros(2)))
    assert fingerprint(one(jnp.ones(2))) != fingerprint(one(jnp.ones(2), k=3))
    assert fingerprint(one(jnp.ones(2))) != fingerprint(two(jnp.ones(2)))


def test_tree_structures_by_node_data():
    ns = namespace(
        """
        import jax
        class Node:
            def __init__(self, x, fn):
                self.x, self.fn = x, fn
        jax.tree_util.register_pytree_node(
            Node, lambda n: ((n.x,), n.fn), lambda fn, xs: Node(xs[0], fn)
        )
        def double(x):
            return 2 * x
        def triple(x):
            return 3 * x
        """
    )

    # the auxiliary data is a function, whose repr shows its address
    def tree(fn):
        return jax.tree_util.tree_structure(ns["Node"](1.0, fn))

    assert fingerprint(tree(ns["double"])) is not None
    assert fingerprint(tree(ns["double"])) == fingerprint(tree(ns["double"]))
    assert fingerprint(tree(ns["double"])) != fingerprint(tree(ns["triple"]))


# ---------------------------------------------------------------- not known
class _Opaque:
    def __init__(self):
        self.lock = threading.Lock()


@pytest.mark.parametrize(
    "make",
    [
        threading.Lock,
        _Opaque,
        lambda: (i for i in range(3)),
        zlib.compressobj,  # an instance of a C type with opaque state
        lambda: sqlite3.connect(":memory:"),
        lambda: weakref.ref(_Opaque),  # shows only addresses
    ],
    ids=["lock", "holds-lock", "generator", "c-type", "connection", "weakref"],
)
def test_opaque_values_are_undescribable(make):
    value = make()

    def f(x):
        return value, x

    assert fingerprint(f) is None


def test_dynamic_global_lookups_are_undescribable():
    ns = namespace("def f(x):\n    return eval('x + 1')\n")
    assert fingerprint(ns["f"]) is None
    ns = namespace("import sys\ndef f(x):\n    return sys.modules['m'].g(x)\n")
    assert fingerprint(ns["f"]) is None


def test_a_leaked_tracer_is_undescribable():
    leaked = []
    jax.jit(lambda x: leaked.append(x) or x)(1.0)
    assert fingerprint(leaked[0]) is None


# ------------------------------------------------------- this project's ops
def _op(fn, static):
    args = ((INPUT, static), {})
    _, treedef = jax.tree_util.tree_flatten(args)
    flat = FlatJaxFunction(fn, treedef, (INPUT, Static(static)), name="f")
    vector = TensorType("float64", shape=(2,))
    return OpFromJax(flat, [vector], [vector])


def test_ops_by_inner_function_and_types():
    ns = namespace("def f(x, k):\n    return (k * x,)\n")
    op = _op(ns["f"], 2.0)
    assert fingerprint(op) == fingerprint(_op(ns["f"], 2.0))
    assert fingerprint(op) != fingerprint(_op(ns["f"], 3.0))


def test_wrapped_ops_and_variables():
    ns = namespace("K = 2.0\ndef f(x):\n    return K * x\n")
    x = pt.vector("x", shape=(2,))
    op = as_jax_op(ns["f"])(x).owner.op
    before = fingerprint(op)
    assert before is not None
    ns["K"] = 3.0
    assert fingerprint(op) != before
    ones = fingerprint(pt.constant(np.ones(2)))
    assert ones == fingerprint(pt.constant(np.ones(2)))
    assert ones != fingerprint(pt.constant(np.zeros(2)))


def test_dataclasses_by_their_fields():
    @dataclasses.dataclass(frozen=True)
    class Config:
        rate: float
        lock: object = None

    assert describe(Config(1.0)) == describe(Config(1.0))
    assert describe(Config(1.0)) != describe(Config(2.0))
    assert fingerprint(Config(1.0, lock=threading.Lock())) is None
    assert describe((1, 2.5, "a", None)) == "(1, 0x1.4000000000000p+1, 'a', None)"
    assert len(digest(describe(Config(1.0)))) == 32


# -------------------------------------------------------------- environment
def test_the_environment_covers_x64_not_the_cache_dir():  # (h)
    x64 = jax.config.jax_enable_x64
    seconds = jax.config.jax_persistent_cache_min_compile_time_secs
    before = environment_fingerprint()
    try:
        jax.config.update("jax_persistent_cache_min_compile_time_secs", seconds + 1)
        jax.config.update("jax_log_compiles", not jax.config.jax_log_compiles)
        assert environment_fingerprint() == before
        jax.config.update("jax_enable_x64", not x64)
        assert environment_fingerprint() != before
    finally:
        jax.config.update("jax_enable_x64", x64)
        jax.config.update("jax_persistent_cache_min_compile_time_secs", seconds)
        jax.config.update("jax_log_compiles", not jax.config.jax_log_compiles)
    assert environment_fingerprint() == before


def test_the_environment_in_fresh_processes(tmp_path):  # (h)
    script = """
        import sys
        import jax
        jax.config.update("jax_enable_x64", sys.argv[-1] == "on")
        from pytensor.compile._jax_ofg.cache.environment import environment_fingerprint
        print(environment_fingerprint())
    """
    (tmp_path / "env.py").write_text(textwrap.dedent(script))
    from _fresh_process import run_python

    def run(flag: str) -> str:
        result = run_python([str(tmp_path / "env.py"), flag], tmp_path, timeout=300)
        return result.stdout.strip().splitlines()[-1]

    assert run("off") != run("on")
    assert run("on") == run("on")


def test_docstring_examples():
    import doctest

    import pytensor.compile._jax_ofg.cache.fingerprints as module

    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0
    assert result.failed == 0


# ------------------------------------------------- fail closed, spot by spot
def test_an_unreadable_pytree_registry_refuses_a_users_pytree_class(monkeypatch):
    from jax._src import tree_util

    user = namespace(
        """
        import jax

        @jax.tree_util.register_pytree_node_class
        class Pair:
            def __init__(self, a, b):
                self.a, self.b = a, b
            def tree_flatten(self):
                return (self.a, self.b), None
            @classmethod
            def tree_unflatten(cls, aux, children):
                return cls(*children)
        """
    )
    assert fingerprint(user["Pair"]) is not None

    class Unreadable:
        def get(self, key):
            raise RuntimeError("moved in this JAX")

    monkeypatch.setattr(tree_util, "_registry", Unreadable())
    with pytest.raises(Undescribable, match="pytree registry cannot be read"):
        describe_or_raise(user["Pair"])
    assert fingerprint(user["Pair"]) is None


def test_unreadable_jit_options_refuse_the_jitted_function():
    def body(x):
        return 2 * x

    class Jitted:  # a jitted function whose options JAX stores otherwise
        __module__ = "jax._src.pjit"
        __wrapped__ = body
        _jit_info = object()  # no ``_replace``

    with pytest.raises(Undescribable, match=r"the options of a jax\.jit function"):
        describe_or_raise(Jitted())
    assert fingerprint(jax.jit(body)) is not None  # JAX's own: described


def test_any_error_while_describing_refuses_instead_of_skipping():
    user = namespace(
        """
        class Odd:
            @property
            def __dict__(self):
                raise RuntimeError("no state today")
        """
    )
    with pytest.raises(Undescribable, match="RuntimeError: no state today"):
        describe_or_raise(user["Odd"]())


@pytest.mark.parametrize(
    "direct_url, kind",
    [
        (None, ("library", "fakepin==1.0")),
        (
            {
                "url": "https://example.org/fakepin.git",
                "vcs_info": {"vcs": "git", "commit_id": "c0ffee"},
            },
            ("library", "fakepin==1.0@c0ffee"),
        ),
        (
            {
                "url": "https://example.org/fakepin-1.0.tar.gz",
                "archive_info": {"hashes": {"sha256": "abc"}},
            },
            ("library", "fakepin==1.0#[('sha256', 'abc')]"),
        ),
        (
            {"url": "https://example.org/fakepin-1.0.tar.gz", "archive_info": {}},
            ("user", ""),
        ),
        ({"url": "file:///src/fakepin", "dir_info": {"editable": True}}, ("user", "")),
        (
            {"url": "file:///src/fakepin.git", "vcs_info": {"commit_id": "c0ffee"}},
            ("user", ""),
        ),
    ],
    ids=[
        "index",
        "vcs",
        "archive with hash",
        "archive without hash",
        "local",
        "local vcs",
    ],
)
def test_a_distribution_is_pinned_by_how_it_was_installed(
    tmp_path, monkeypatch, direct_url, kind
):
    """A version alone pins files installed from an index; a VCS install needs
    its commit, an archive its hash; anything else is followed as user code."""
    package = tmp_path / "fakepin"
    package.mkdir()
    (package / "__init__.py").write_text("VALUE = 1\n")
    info = tmp_path / "fakepin-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: fakepin\nVersion: 1.0\n"
    )
    (info / "RECORD").write_text(
        "fakepin/__init__.py,,\nfakepin-1.0.dist-info/RECORD,,\n"
    )
    if direct_url is not None:
        (info / "direct_url.json").write_text(json.dumps(direct_url))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "fakepin", raising=False)
    importlib.import_module("fakepin")
    try:
        assert module_kind("fakepin") == kind
    finally:
        sys.modules.pop("fakepin", None)


def test_a_library_is_found_by_its_record_not_by_locating_each_file(
    tmp_path, monkeypatch
):
    """A distribution's RECORD is read, not each recorded file located: every
    process computing a key classifies the libraries it meets, which record
    hundreds to thousands of files (PyTensor 838, NumPy 1334, SciPy 2421)."""
    package = tmp_path / "fakerecord"
    package.mkdir()
    (package / "__init__.py").write_text("VALUE = 1\n")
    info = tmp_path / "fakerecord-2.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: fakerecord\nVersion: 2.0\n"
    )
    many = "".join(f"fakerecord/part_{i}.py,,\n" for i in range(2000))
    (info / "RECORD").write_text(
        f"fakerecord/__init__.py,,\n{many}fakerecord-2.0.dist-info/RECORD,,\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "fakerecord", raising=False)
    importlib.import_module("fakerecord")
    located = []
    stat = os.stat

    def counted_stat(path, *args, **kwargs):
        located.append(path)
        return stat(path, *args, **kwargs)

    monkeypatch.setattr(os, "stat", counted_stat)
    try:
        assert module_kind("fakerecord") == ("library", "fakerecord==2.0")
    finally:
        sys.modules.pop("fakerecord", None)
    recorded_parts = [p for p in map(str, located) if "part_" in p]
    assert recorded_parts == []
