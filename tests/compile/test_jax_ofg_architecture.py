"""The package's structure: one place acts on the process, modules form layers.

* Every module but the facade (``pytensor/compile/jax_ofg.py``) imports
  without side effects; the facade's ``install()`` does every process-wide
  act, once.
* The modules' imports of each other form no cycle, and no function imports
  one of them to dodge a cycle.
* The guide's module map puts every module in one layer, and a module imports
  only from its own layer and the layers above it.
* The implementation is a private package, ``pytensor/compile/_jax_ofg/``, one
  folder per subsystem (one layer of the map each), at most 8 modules a
  folder, no ``jax_ofg_`` prefix inside it, ``__init__.py`` files that hold a
  docstring only.
* The trace cache has one door: outside ``cache/``, only ``cache/api`` is
  imported, by the package and by tests (but the cache's own), benchmarks
  and examples.
* No module holds more than 3 module-level registries (mutable process-wide
  state); the trace cache's state is one object.
* No function is longer than 80 lines.
"""

import ast
import collections.abc
import importlib
import itertools
import json
import re
import threading
import types
import typing
import weakref
from pathlib import Path

from _checkout import PRIVATE, ROOT, module_files, package_files
from _fresh_process import run_script


CHECKOUT = ROOT
FACADE = "pytensor.compile.jax_ofg"
JAX_DISPATCH = "pytensor.link.jax.dispatch.jax_ofg"
NUMBA_DISPATCH = "pytensor.link.numba.dispatch.jax_ofg"
#: The private package holding the implementation, one folder per subsystem.
PRIVATE_PACKAGE = "pytensor.compile._jax_ofg"
#: The trace cache, and its one door.
CACHE = f"{PRIVATE_PACKAGE}.cache"
CACHE_DOOR = f"{CACHE}.api"


#: Every module of the package, by dotted name.
MODULES = module_files()


def _own_imports(tree: ast.AST) -> list[tuple[ast.AST, str]]:
    """The imports of this package's modules in ``tree``, with the node doing each."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        else:
            continue
        found += [(node, name) for name in names if name in MODULES]
    return found


#: Imports inside functions that are there on purpose (start-up), not to
#: dodge a cycle: (module, function, imported module).
DEFERRED = {
    # Importing it imports PyTensor's JAX backend (~1 s), which a process
    # served by the trace cache never needs: registered when it is imported.
    (FACADE, "_register_jax_lowering", JAX_DISPATCH),
    # Importing it imports PyTensor's Numba dispatch (~0.1 s), which a
    # process compiling with another linker never needs.
    (FACADE, "_register_numba_call", NUMBA_DISPATCH),
}


def _function_level_imports(module: str, tree: ast.AST) -> list[str]:
    inside = []
    for function in ast.walk(tree):
        if isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
            inside += [
                f"{name} (in {function.name}, line {node.lineno})"
                for node, name in _own_imports(function)
                if (module, function.name, name) not in DEFERRED
            ]
    return inside


def test_no_function_imports_one_of_the_package_modules():
    offenders = {
        name: found
        for name, path in MODULES.items()
        if (found := _function_level_imports(name, ast.parse(path.read_text())))
    }
    assert not offenders


def _import_graph() -> dict[str, set[str]]:
    """Per module, the package's modules it imports (itself left out)."""
    return {
        name: {imported for _, imported in _own_imports(ast.parse(path.read_text()))}
        - {name}
        for name, path in MODULES.items()
    }


def test_outside_the_trace_cache_only_its_door_is_imported():
    """Rooms outside ``cache/`` use the trace cache through ``cache/api`` alone."""
    through_a_window = [
        f"{module} imports {imported}"
        for module, imports in _import_graph().items()
        if not module.startswith(CACHE + ".")
        for imported in sorted(imports)
        if imported.startswith(CACHE + ".") and imported != CACHE_DOOR
    ]
    assert not through_a_window
    # ``from ...cache import api`` names the package: that is the door too.
    for name, path in MODULES.items():
        if name.startswith(CACHE + "."):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module == CACHE:
                assert [a.name for a in node.names] == ["api"], name


def test_no_function_is_longer_than_80_lines():
    long = [
        f"{name}.{node.name}: {node.end_lineno - node.lineno + 1} lines"
        for name, path in MODULES.items()
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.end_lineno - node.lineno + 1 > 80
    ]
    assert not long


def test_the_modules_import_each_other_without_cycles():
    graph = _import_graph()
    # Peel off modules that import nothing left; a cycle is what remains.
    remaining = dict(graph)
    while True:
        leaves = [m for m, deps in remaining.items() if not deps & remaining.keys()]
        if not leaves:
            break
        for leaf in leaves:
            del remaining[leaf]
    assert not remaining, f"import cycle among {sorted(remaining)}"
    # The facade is the top layer: no module of the package imports it.
    assert not any(FACADE in deps for deps in graph.values())


#: Run in a fresh process with floatX=float32, so that PyTensor's JAX backend
#: leaves x64 off: reports what is registered after importing every module but
#: the facade, then after importing the facade.
PROBE = """
import importlib, json, logging, sys
import jax
modules = {modules!r}
for name in modules:
    importlib.import_module(name)

def state():
    from pytensor import config
    from pytensor.compile.mode import optdb
    from pytensor.compile._jax_ofg.host.op import JaxHostOp
    from pytensor.compile._jax_ofg.op.from_jax import OpFromJax
    from pytensor.compile._jax_ofg.op.wrapper import SymbolicCallable
    from pytensor.graph.replace import _vectorize_node
    from pytensor.link.jax.linker import JAXLinker
    from pytensor.tensor.basic import _as_tensor_variable
    return dict(
        x64=bool(jax.config.jax_enable_x64),
        jax_funcify=(
            "pytensor.link.jax.dispatch" in sys.modules
            and OpFromJax in sys.modules["pytensor.link.jax.dispatch"].jax_funcify.registry
        ),
        numba_funcify=(
            "pytensor.link.numba.dispatch.basic" in sys.modules
            and JaxHostOp in sys.modules[
                "pytensor.link.numba.dispatch.basic"
            ].numba_funcify_and_cache_key.registry
        ),
        vectorize=OpFromJax in _vectorize_node.registry,
        as_tensor=SymbolicCallable in _as_tensor_variable.registry,
        rewrites=sorted(
            name
            for name in ("jax_islands", "jax_ofg_bake_constant_inputs",
                         "jax_ofg_fuse_value_and_vjp", "jax_ofg_prune_pullback_inputs",
                         "jax_ofg_readonly_outputs", "jax_ofg_vmap_blockwise")
            if name in optdb
        ),
        flag=hasattr(config, "jax_ofg__xla_cache"),
        xla_cache_dir=jax.config.jax_compilation_cache_dir is not None,
        import_hook=any(type(f).__name__ == "RunAfterImport" for f in sys.meta_path),
        jax_backend="pytensor.link.jax.dispatch" in sys.modules,
        numba_dispatch="pytensor.link.numba.dispatch" in sys.modules,
        jax_linker=getattr(JAXLinker.jit_compile, "checks_forked_processes", False),
        numba_bodies=any(m.endswith("jax_ofg._bodies") for m in sys.modules),
        callback_log_filter=any(
            type(f).__name__ == "MuteCallbackLogs"
            for f in logging.getLogger("jax._src.callback").filters
        ),
    )

before = state()
import pytensor.compile.jax_ofg as facade
after = state()
facade.install()  # again: nothing new, no error
again = state()
import pytensor.link.jax.dispatch  # PyTensor's JAX backend: our lowering joins it
backend = state()
import pytensor.link.numba.dispatch  # PyTensor's Numba dispatch: our call joins it
numba = state()
print(json.dumps(dict(before=before, after=after, again=again, backend=backend, numba=numba)))
"""


def test_only_the_facade_acts_on_the_process(tmp_path):
    # Importing our JAX (Numba) dispatch imports PyTensor's JAX backend
    # (Numba dispatch), its package: it is imported with it, at the end.
    facade_and_dispatch = (FACADE, JAX_DISPATCH, NUMBA_DISPATCH)
    others = sorted(name for name in MODULES if name not in facade_and_dispatch)
    flags = f"floatX=float32,base_compiledir={tmp_path / 'compiledir'}"
    result = run_script(
        PROBE.format(modules=others),
        tmp_path,
        timeout=300,
        env={"PYTENSOR_FLAGS": flags},
    )
    report = json.loads(result.stdout.strip().splitlines()[-1])
    before, after = report["before"], report["after"]
    assert before == {
        "x64": False,
        "jax_funcify": False,
        "numba_funcify": False,
        "vectorize": False,
        "as_tensor": False,
        "rewrites": [],
        "flag": False,
        "xla_cache_dir": False,
        "import_hook": False,
        "jax_backend": False,
        "numba_dispatch": False,
        "jax_linker": False,
        "numba_bodies": False,
        "callback_log_filter": False,
    }
    assert after == {
        "x64": True,
        # PyTensor's JAX backend (about a second to import) is not imported:
        # the lowering of OpFromJax is registered when it is.
        "jax_funcify": False,
        # Nor is its Numba dispatch (about a tenth of a second): the call of
        # JaxHostOp is registered when it is.
        "numba_funcify": False,
        "vectorize": True,
        "as_tensor": True,
        "rewrites": [
            "jax_islands",
            "jax_ofg_bake_constant_inputs",
            "jax_ofg_fuse_value_and_vjp",
            "jax_ofg_prune_pullback_inputs",
            "jax_ofg_readonly_outputs",
            "jax_ofg_vmap_blockwise",
        ],
        "flag": True,
        "xla_cache_dir": True,
        "import_hook": True,
        "jax_backend": False,
        "numba_dispatch": False,
        "jax_linker": False,
        "numba_bodies": False,
        "callback_log_filter": True,
    }
    assert report["again"] == after
    # Once the backend is imported (its floatX=float32 turns x64 off): our
    # lowering and the JAX linker's fork check are installed, and x64 is on again.
    assert report["backend"] == {
        **after,
        "jax_funcify": True,
        "jax_backend": True,
        "jax_linker": True,
    }
    assert report["numba"] == {
        **report["backend"],
        "numba_funcify": True,
        "numba_dispatch": True,
        "numba_bodies": True,
    }


def _module_map() -> str:
    """The developer notes' map of the modules (its page, up to the next section)."""
    notes = (CHECKOUT / "doc" / "developer.rst").read_text()
    notes = notes[notes.index("The modules and their layers") :]
    return notes[: notes.index("\nFrom a call to an op\n")]


def _dotted_name(named: str) -> str | None:
    """The module a map entry names, or None: a path in the private package
    (``host/op``), a path under ``pytensor/`` (``link/jax/dispatch/jax_ofg``)
    or ``jax_ofg`` alone (the facade)."""
    if named == "jax_ofg":
        return FACADE
    if named.startswith("link/"):
        name = "pytensor." + named.replace("/", ".")
    else:
        name = f"{PRIVATE_PACKAGE}.{named.replace('/', '.')}"
    return name if name in MODULES else None


def _map_layers() -> list[list[str]]:
    """The modules of each row of the map's table, top to bottom, by dotted name."""
    notes = _module_map()
    lines = notes[notes.index(".. list-table::") :].splitlines()[1:]
    table = "\n".join(
        itertools.takewhile(lambda line: not line or line.startswith(" "), lines)
    )
    rows = table.split("\n   * - ")[2:]  # before: the options, the header row
    # Each row: the subsystem, its modules, where it is explained.
    return [
        list(
            dict.fromkeys(
                name
                for named in re.findall(r"``([\w/]+)``", row.split("\n     - ")[1])
                if (name := _dotted_name(named))
            )
        )
        for row in rows
    ]


def test_the_guide_maps_every_module():
    """The guide's module map names each module, in exactly one row."""
    mapped = [module for layer in _map_layers() for module in layer]
    missing = sorted(set(MODULES) - set(mapped))
    assert not missing, f"not in the guide's module map: {missing}"
    assert len(mapped) == len(set(mapped)), "a module in two rows of the map"
    notes = _module_map()
    for folder in ("link/jax/dispatch/jax_ofg", "link/numba/dispatch/jax_ofg"):
        assert f"``{folder}``" in notes


def _folders() -> dict[Path, list[Path]]:
    """Every folder of the checkout's ``pytensor/`` tree holding modules: its modules."""
    folders: dict[Path, list[Path]] = {}
    for path in sorted((CHECKOUT / "pytensor").rglob("*.py")):
        if path.name != "__init__.py":
            folders.setdefault(path.parent, []).append(path)
    return folders


def test_no_folder_holds_more_than_eight_modules():
    crowded = {
        str(folder.relative_to(CHECKOUT)): len(paths)
        for folder, paths in _folders().items()
        if len(paths) > 8
    }
    assert not crowded


def test_the_private_package_names_do_not_repeat_it():
    """Inside the private package, no ``jax_ofg_`` prefix: the folder says it."""
    repeated = [
        name
        for name in MODULES
        if name.startswith(PRIVATE_PACKAGE + ".")
        and any(part.startswith("jax_ofg") for part in name.split(".")[3:])
    ]
    assert not repeated


def test_each_folder_of_the_private_package_is_one_row_of_the_map():
    """A subsystem is a folder: its modules are one layer of the map, alone
    with the dispatch that belongs to it."""
    depth = {module: k for k, layer in enumerate(_map_layers()) for module in layer}
    for folder in PRIVATE.iterdir():
        if not folder.is_dir() or folder.name == "__pycache__":
            continue
        rows = {
            depth[name]
            for name in MODULES
            if name.startswith(f"{PRIVATE_PACKAGE}.{folder.name}.")
        }
        assert len(rows) == 1, f"{folder.name}/ spans rows {sorted(rows)}"
        (row,) = rows
        others = [
            m
            for m in _map_layers()[row]
            if m.startswith(PRIVATE_PACKAGE + ".")
            and not m.startswith(f"{PRIVATE_PACKAGE}.{folder.name}.")
        ]
        assert not others, f"row of {folder.name}/ holds {others}"


def test_the_private_packages_init_files_hold_only_a_docstring():
    """Importing a folder of the private package imports and does nothing."""
    for name, path in package_files().items():
        body = ast.parse(path.read_text()).body
        assert len(body) == 1, name
        assert isinstance(body[0], ast.Expr), name
        assert isinstance(body[0].value, ast.Constant), name
        assert isinstance(body[0].value.value, str), name


def test_the_map_layers_import_only_from_the_layers_above():
    layers = _map_layers()
    mapped = [module for layer in layers for module in layer]
    assert sorted(mapped) == sorted(MODULES), "each module in one layer of the map"
    assert layers[-1] == [FACADE]
    depth = {module: k for k, layer in enumerate(layers) for module in layer}
    upward = [
        f"{module} imports {imported}"
        for module, imports in _import_graph().items()
        for imported in sorted(imports)
        if depth[imported] > depth[module]
    ]
    assert not upward, f"imports from a layer below in the guide's map: {upward}"


# ------------------------------------------------------------- process state
#: Containers a module-level name holds as a registry (mutable, process-wide).
REGISTRY_TYPES = (
    collections.abc.MutableMapping,
    collections.abc.MutableSequence,
    collections.abc.MutableSet,
    weakref.WeakSet,
    threading.local,
)
#: At most this many registries a module.
MAX_REGISTRIES = 3
#: Modules over the limit whose rework is under way on another branch: each
#: is named with the names it holds, so that the test fails once the rework
#: lands (remove the entry then).
REWORK_UNDER_WAY: dict[str, list[str]] = {}


def _is_registry(value: object) -> bool:
    """A container, or a store or state object (what has ``clear`` or ``reset``);
    not a class, a module, a function or a type alias (``list[int]``)."""
    if isinstance(value, type | types.ModuleType | types.FunctionType) or (
        typing.get_origin(value) is not None
    ):
        return False
    return isinstance(value, REGISTRY_TYPES) or any(
        callable(getattr(value, method, None)) for method in ("clear", "reset")
    )


def _module_level_names(tree: ast.Module) -> set[str]:
    names = set()
    for node in tree.body:
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, ast.AnnAssign):
            targets = [node.target]
        else:
            continue
        names |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
    return names - {name for name in names if name.startswith("__")}


def registries() -> dict[str, list[str]]:
    """Per module, its module-level registries: names it binds to a registry
    (:func:`_is_registry`) and names its functions rebind (``global``)."""
    import pytensor.compile.jax_ofg  # as in use: install() ran
    import pytensor.link.jax.dispatch  # noqa: F401  (our JAX dispatch needs it)

    found = {}
    for name, path in MODULES.items():
        tree = ast.parse(path.read_text())
        module = vars(importlib.import_module(name))
        bound = {
            k
            for k in _module_level_names(tree)
            if k in module and _is_registry(module[k])
        }
        rebound = {
            n
            for node in ast.walk(tree)
            if isinstance(node, ast.Global)
            for n in node.names
        }
        if bound | rebound:
            found[name] = sorted(bound | rebound)
    return found


def test_no_module_holds_more_than_three_registries():
    """Process-wide state sits in few places: the trace cache's in one object
    (``cache/storage``'s ``STATE``, behind ``cache/api``)."""
    held = registries()
    crowded = {
        name: names
        for name, names in held.items()
        if len(names) > MAX_REGISTRIES and REWORK_UNDER_WAY.get(name) != names
    }
    assert not crowded
    stale = [
        name for name in REWORK_UNDER_WAY if len(held.get(name, ())) <= MAX_REGISTRIES
    ]
    assert not stale, f"reworked now: remove {stale} from REWORK_UNDER_WAY"


def test_the_trace_cache_keeps_its_state_in_one_object():
    """Outside ``cache/storage``'s ``STATE``, the cache's modules hold no
    registry but constant tables and the store on disk."""
    from pytensor.compile._jax_ofg.cache.api import STATE, reset

    held = {
        name: names for name, names in registries().items() if name.startswith(CACHE)
    }
    assert held == {
        f"{CACHE}.storage": ["STATE"],
        # a constant table (read on every value described)
        f"{CACHE}.fingerprints": ["_ATOMS"],
        # entries on disk: a folder, no state of this process
        f"{CACHE}.traces": ["_DISK"],
    }
    assert callable(STATE.reset) and reset.__module__ == CACHE_DOOR


# --------------------------------------------------- the door, from outside
#: The trace cache's own unit tests, which may open its modules.
CACHE_OWN_TESTS = {
    "tests/compile/test_jax_ofg_fingerprints.py",
    "tests/compile/test_jax_ofg_trace_cache.py",
    "tests/compile/test_jax_ofg_trace_allowlist.py",
}
#: Files another branch moves to the door (remove the entry once it has).
MOVING_TO_THE_DOOR: set[str] = set()
#: A module of ``cache/`` named in code or in a script a test runs: dotted
#: (``cache.traces``, ``cache import traces``) or its file.
_CACHE_MODULE = re.compile(
    r"_jax_ofg\.cache\.(\w+)|_jax_ofg\.cache import \(?\s*(\w+)|_jax_ofg/cache/(\w+)\.py"
)


def _windows(path: Path) -> list[str]:
    """The modules of ``cache/`` but ``api`` that ``path`` names."""
    return sorted(
        {
            named
            for match in _CACHE_MODULE.finditer(path.read_text())
            for named in match.groups()
            if named and named != "api"
        }
    )


def test_tests_benchmarks_and_examples_use_the_trace_cache_through_its_door():
    files = [
        path
        for folder in ("tests", "benchmarks", "examples")
        for path in sorted((CHECKOUT / folder).rglob("*.py"))
    ] + [CHECKOUT / "conftest.py"]
    through_a_window = {
        relative: windows
        for path in files
        if (relative := str(path.relative_to(CHECKOUT))) not in CACHE_OWN_TESTS
        and (windows := _windows(path))
    }
    assert set(through_a_window) == MOVING_TO_THE_DOOR, (
        "outside the cache's own tests, only cache/api may be imported: "
        f"{through_a_window}"
    )
