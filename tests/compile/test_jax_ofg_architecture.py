"""The package's structure: one place acts on the process, modules form layers.

* Every module but the facade (``pytensor/compile/jax_ofg.py``) imports
  without side effects; the facade's ``install()`` does every process-wide
  act, once.
* The modules' imports of each other form no cycle, and no function imports
  one of them to dodge a cycle.
* The guide's module map puts every module in one layer, and a module imports
  only from its own layer and the layers above it.
"""

import ast
import itertools
import json
import re

from _checkout import ROOT, module_files
from _fresh_process import run_script


CHECKOUT = ROOT
FACADE = "pytensor.compile.jax_ofg"
JAX_DISPATCH = "pytensor.link.jax.dispatch.jax_ofg"


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
    from pytensor.compile.jax_ofg_host_op import JaxHostOp
    from pytensor.compile.jax_ofg_op import OpFromJax
    from pytensor.compile.jax_ofg_wrapper import SymbolicCallable
    from pytensor.graph.replace import _vectorize_node
    from pytensor.link.jax.linker import JAXLinker
    from pytensor.link.numba.dispatch.basic import numba_funcify_and_cache_key
    from pytensor.tensor.basic import _as_tensor_variable
    return dict(
        x64=bool(jax.config.jax_enable_x64),
        jax_funcify=(
            "pytensor.link.jax.dispatch" in sys.modules
            and OpFromJax in sys.modules["pytensor.link.jax.dispatch"].jax_funcify.registry
        ),
        numba_funcify=JaxHostOp in numba_funcify_and_cache_key.registry,
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
print(json.dumps(dict(before=before, after=after, again=again, backend=backend)))
"""


def test_only_the_facade_acts_on_the_process(tmp_path):
    # Importing our JAX dispatch imports PyTensor's JAX backend, its package:
    # it is imported with the backend, at the end.
    others = sorted(name for name in MODULES if name not in (FACADE, JAX_DISPATCH))
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
        "jax_linker": False,
        "numba_bodies": False,
        "callback_log_filter": False,
    }
    assert after == {
        "x64": True,
        # PyTensor's JAX backend (about a second to import) is not imported:
        # the lowering of OpFromJax is registered when it is.
        "jax_funcify": False,
        "numba_funcify": True,
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
        "jax_linker": False,
        "numba_bodies": True,
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


def _module_map() -> str:
    """The guide's developer notes on the modules, up to the reference."""
    guide = (CHECKOUT / "doc" / "library" / "jax_ofg.rst").read_text()
    notes = guide[guide.index("Developer notes: the modules and their layers") :]
    return notes[: notes.index("\nReference\n")]


def _dotted_name(named: str) -> str:
    """The module a map entry names: a path under ``pytensor/``, else the last
    dotted part of one module (``jax_ofg`` alone: the facade)."""
    if "/" in named:
        return "pytensor." + named.replace("/", ".")
    if named == "jax_ofg":
        return FACADE
    (name,) = [m for m in MODULES if m.rsplit(".", 1)[1] == named]
    return name


def _map_layers() -> list[list[str]]:
    """The modules of each row of the map's table, top to bottom, by dotted name."""
    notes = _module_map()
    lines = notes[notes.index(".. list-table::") :].splitlines()[1:]
    table = "\n".join(
        itertools.takewhile(lambda line: not line or line.startswith(" "), lines)
    )
    rows = table.split("\n   * - ")[2:]  # before: the options, the header row
    return [
        list(
            dict.fromkeys(map(_dotted_name, re.findall(r"``([\w/]*jax_ofg\w*)``", row)))
        )
        for row in rows
    ]


def test_the_guide_maps_every_module():
    """The guide's developer notes name each module (by its last dotted part)."""
    notes = _module_map()
    named = set(re.findall(r"[`/](jax_ofg\w*)``", notes))
    missing = [m for m in MODULES if m.rsplit(".", 1)[1] not in named]
    # link/*/dispatch/jax_ofg and compile/jax_ofg share a name: by folder there
    missing = [m for m in missing if m.rsplit(".", 1)[1] != "jax_ofg"]
    assert not missing, f"not in the guide's module map: {missing}"
    for folder in ("link/jax/dispatch/jax_ofg", "link/numba/dispatch/jax_ofg"):
        assert f"``{folder}``" in notes


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
