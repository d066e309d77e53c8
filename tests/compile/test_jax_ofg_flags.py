"""The package's flags: declared in one table, each read in one place, all in the docs.

* ``flags.py`` is the only module that adds a PyTensor flag; importing the
  package declares every flag of its table, with its doc.
* A flag is read through its ``Flag.value``, in one place of the package;
  no module reads ``config.jax_ofg__*`` itself.
* The docs' tables (``.. jax-ofg-flags::``, ``doc/flags_directive.py``) list
  every flag with when it is read.
"""

import ast
import importlib.util
import re

import pytest
from _checkout import ROOT, module_files
from docutils import nodes
from docutils.core import publish_doctree

import pytensor
import pytensor.compile.jax_ofg  # declares every flag
from pytensor.compile._jax_ofg import flags


PRIVATE = "pytensor.compile._jax_ofg"
FLAGS_MODULE = f"{PRIVATE}.flags"
MODULES = module_files()
#: The flags' constants in ``flags``, by flag name.
CONSTANTS = {
    flag.name: name
    for name, flag in vars(flags).items()
    if isinstance(flag, flags.Flag)
}


def _trees() -> dict[str, ast.AST]:
    return {name: ast.parse(path.read_text()) for name, path in MODULES.items()}


def test_only_the_flags_module_adds_a_flag():
    adding = [
        f"{name}:{node.lineno}"
        for name, path in MODULES.items()
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "add"
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id == "config"
    ]
    assert adding == [f"{FLAGS_MODULE}:{_line_of(FLAGS_MODULE, 'config.add(')}"]


def _line_of(module: str, text: str) -> int:
    lines = MODULES[module].read_text().splitlines()
    return next(k for k, line in enumerate(lines, 1) if text in line)


def test_every_flag_is_in_the_table_and_declared_with_its_doc():
    names = [flag.name for flag in flags.FLAGS]
    assert len(names) == len(set(names))
    assert sorted(CONSTANTS) == sorted(names), "a Flag outside FLAGS, or twice"
    for flag in flags.FLAGS:
        assert flag.name.startswith("jax_ofg__")
        param = pytensor.config._config_var_dict[flag.name]
        assert param.doc == flag.doc
        assert param.default == flag.default
        assert flag.read in flags.MOMENTS, flag.name
        assert (flag.change is None) == (flag.off is None), flag.name
    # Every flag the package's code or docstrings name is one of the table.
    named = {
        match
        for path in MODULES.values()
        for match in re.findall(r"jax_ofg__[a-z_]+[a-z]", path.read_text())
    }
    assert named <= set(names), sorted(named - set(names))


def _reads(tree: ast.AST) -> list[str]:
    """The flags a module reads: ``CONSTANT.value`` or ``flags.CONSTANT.value``."""
    found = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Attribute) and node.attr == "value"):
            continue
        inner = node.value
        name = getattr(inner, "id", None) or getattr(inner, "attr", None)
        if name in CONSTANTS.values():
            found.append(name)
    return found


def test_each_flag_is_read_in_one_place():
    readers: dict[str, list[str]] = {}
    for module, tree in _trees().items():
        for constant in _reads(tree):
            readers.setdefault(constant, []).append(module)
    twice = {constant: where for constant, where in readers.items() if len(where) > 1}
    assert not twice


def test_no_module_reads_a_flag_from_config_itself():
    """``config.jax_ofg__x`` and ``getattr(config, "jax_ofg__x")`` are reads
    around the table (assigning one, as ``max_size_set_to`` does, is no read)."""
    around = []
    for module, tree in _trees().items():
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.ctx, ast.Load)
                and node.attr.startswith("jax_ofg__")
            ) or (
                isinstance(node, ast.Call)
                and getattr(node.func, "id", None) in ("getattr", "hasattr")
                and len(node.args) > 1
                and isinstance(node.args[1], ast.Constant)
                and str(node.args[1].value).startswith("jax_ofg__")
            ):
                around.append(f"{module}:{node.lineno}")
    assert not around


def test_a_flag_is_read_as_set_and_a_bad_value_names_it():
    with pytensor.config.change_flags(jax_ofg__host_device=" CPU:0 "):
        assert flags.HOST_DEVICE.value == "cpu:0"
    with pytensor.config.change_flags(jax_ofg__trace_cache=False):
        assert flags.TRACE_CACHE.value == "off"
    with (
        pytest.raises(ValueError, match="jax_ofg__small_linalg_max_size"),
        pytensor.config.change_flags(jax_ofg__small_linalg_max_size=-1),
    ):
        pass


def test_a_flag_not_declared_reads_as_the_package_not_installed():
    """Before ``install()`` declared it: the trace cache is off, no thread is
    pinned, the others have their defaults."""
    undeclared = [
        flags.Flag(f"jax_ofg__undeclared_{k}", f.doc, f.default, f.read)
        for k, f in enumerate((flags.XLA_CACHE, flags.HOST_DEVICE))
    ]
    assert [flag.value for flag in undeclared] == [True, "cpu"]
    assert (
        flags.Flag(
            "jax_ofg__undeclared", "", "on", flags.AT_LOOKUP, undeclared="off"
        ).value
        == "off"
    )
    assert flags.TRACE_CACHE.undeclared == "off"
    assert flags.PIN_SAMPLER_THREADS.undeclared is False


# ------------------------------------------------------------------ the docs
def _directive():
    spec = importlib.util.spec_from_file_location(
        "flags_directive", ROOT / "doc" / "flags_directive.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _table_rows(kind: str) -> list[list[str]]:
    """The generated table ``kind``, parsed by docutils: each body row's cells' text."""
    text = "\n".join(_directive().list_table(kind))
    tree = publish_doctree(text, settings_overrides={"report_level": 5})
    (table,) = list(tree.findall(nodes.table))
    body = next(iter(table.findall(nodes.tbody)))
    return [
        [entry.astext() for entry in row.findall(nodes.entry)]
        for row in body.findall(nodes.row)
    ]


def test_the_table_of_all_flags_lists_each_with_when_it_is_read():
    rows = _table_rows("all")
    assert len(rows) == len(flags.FLAGS)
    for flag, (name, default, read, doc) in zip(flags.FLAGS, rows, strict=True):
        assert name == flag.name
        assert default == repr(flag.default)
        assert read == flag.read
        assert doc.split()[:3] == flag.doc.split()[:3]


def test_the_table_of_changes_lists_each_switch_with_when_it_is_read():
    rows = _table_rows("changes")
    switches = [flag for flag in flags.FLAGS if flag.change is not None]
    assert len(rows) == len(switches)
    for flag, (_, turned_off_by) in zip(switches, rows, strict=True):
        assert turned_off_by == f"{flag.name}={flag.off}, read {flag.read}"
    assert flags.HOST_DEVICE not in switches  # a setting, no change to turn off


def test_the_docs_show_the_generated_tables():
    pages = {
        str(path.relative_to(ROOT)): path.read_text()
        for path in (ROOT / "doc").rglob("*.rst")
    }
    using = {
        kind: [
            page
            for page, text in pages.items()
            if f".. jax-ofg-flags:: {kind}\n" in text
        ]
        for kind in ("changes", "all")
    }
    assert using["all"] == ["doc/library/jax_ofg.rst"]
    assert len(using["changes"]) == 1
    (page,) = using["changes"]
    text = pages[page]
    # In the section's own text, before the next section's title
    section = text[text.index("What importing the package changes\n") :]
    body = section.split("\n", 2)[2]
    assert body.index(".. jax-ofg-flags:: changes") < body.index("\n---")
    conf = (ROOT / "doc" / "conf.py").read_text()
    assert '"flags_directive"' in conf
