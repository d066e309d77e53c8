"""Patches of other libraries and process-wide hooks: each labelled, each switchable.

Every replacement of another library's callable or setting lives in
``patches/``, every process-wide hook in ``hooks/``, one per module, whose
docstring says what it changes, why, which upstream change would remove it,
the releases it was checked with, and the flag that turns it off; getting
started lists each flag for users.
"""

import ast
import json
import re

import pytest
from _checkout import module_files

import pytensor
import pytensor.compile.jax_ofg  # adds every flag
from pytensor.compile._jax_ofg import flags


PRIVATE = "pytensor.compile._jax_ofg"
MODULES = module_files()
#: The modules that patch or hook: one patch or hook each.
LABELLED = sorted(
    name
    for name in MODULES
    if name.startswith((f"{PRIVATE}.patches.", f"{PRIVATE}.hooks."))
)
SECTIONS = ("Changes", "Why", "Upstream", "Checked with", "Off switch")

#: Calls that patch another library or hook the process, by the name called.
PATCHING_CALLS = frozenset(
    {
        "patch_method",
        "wrap_cpu_lowering",
        "addaudithook",
        "register_at_fork",
        "use_tool_id",
        "addFilter",
    }
)


def sections(docstring: str) -> dict[str, str]:
    """A numpy-style docstring's sections (a title underlined with dashes), by title."""
    found = re.split(r"^(\w[\w ]*)\n-+\n", docstring, flags=re.MULTILINE)
    return {title: body.strip() for title, body in zip(found[1::2], found[2::2])}


def docstring(name: str) -> str:
    return ast.get_docstring(ast.parse(MODULES[name].read_text())) or ""


def test_the_patches_and_hooks_are_those_known():
    """A new patch or hook is a new module here, and a new line in this list."""
    assert [name.removeprefix(f"{PRIVATE}.") for name in LABELLED] == [
        "hooks.at_fork",
        "hooks.audit_hook",
        "hooks.callback_logs",
        "hooks.export_serializer",
        "hooks.import_finder",
        "hooks.monitoring_tool",
        "patches.jax_linker_check",
        "patches.linalg_lowering",
        "patches.numba_direct_thunk",
        "patches.nutpie_adaptation",
        "patches.nutpie_host_callbacks",
        "patches.pymc_sampling",
        "patches.xla_cache",
        "patches.xla_cache_writes",
    ]


@pytest.mark.parametrize("name", LABELLED)
def test_each_patch_says_what_why_upstream_versions_and_switch(name):
    found = sections(docstring(name))
    missing = [title for title in SECTIONS if not found.get(title)]
    assert not missing, f"{name}: no {missing}"
    upstream = found["Upstream"]
    assert "https://github.com/" in upstream or upstream.startswith("No "), name
    assert "would" in upstream, f"{name}: what upstream change would remove it"
    assert re.search(r"\d+\.\d+", found["Checked with"]), name
    switches = re.findall(r"jax_ofg__\w+", found["Off switch"])
    assert switches, f"{name}: no flag in its off switch"
    for flag in switches:
        assert hasattr(pytensor.config, flag), f"{name}: {flag} is no flag"


def test_nothing_else_patches_or_hooks():
    """A patching call outside ``patches/`` and ``hooks/`` (``compat`` defines
    the helpers) is a patch without a label."""
    outside = [
        f"{name}:{node.lineno}"
        for name, path in MODULES.items()
        if name not in LABELLED and name != f"{PRIVATE}.compat"
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute | ast.Name)
        and getattr(node.func, "attr", getattr(node.func, "id", None)) in PATCHING_CALLS
    ]
    assert not outside


def test_the_users_table_of_changes_lists_every_switch():
    """The users' table, "What importing the package changes", is generated
    from the flags that turn a change off (``test_jax_ofg_flags`` checks the
    page shows it): each patch's and hook's flag is one."""
    switches = {flag.name: flag for flag in flags.FLAGS if flag.change is not None}
    for name in LABELLED:
        for flag in re.findall(
            r"jax_ofg__\w+", sections(docstring(name))["Off switch"]
        ):
            assert flag in switches, f"{flag} ({name})"
    listed = " ".join(flag.change for flag in switches.values())
    assert "patches/" not in listed and "hooks/" not in listed  # no private paths


#: Compiles and runs a wrapped function, then reports what of the trace
#: cache's watch runs in the process.
WATCH_PROBE = """
import json, sys
import numpy as np
import pytensor, pytensor.tensor as pt
from pytensor.compile.jax_ofg import as_jax_op, trace_cache_info
from pytensor.compile._jax_ofg.cache.api import STATE
from pytensor.compile._jax_ofg.hooks import audit_hook, monitoring_tool

@as_jax_op
def double(x):
    return 2.0 * x

x = pt.vector("x", shape=(3,))
f = pytensor.function([x], double(x) + 1.0)
assert (f(np.ones(3)) == 3.0).all()
info = trace_cache_info()
print(json.dumps(dict(
    audit_hook=audit_hook._installed,
    tool=monitoring_tool._claimed,
    tools_in_use=[i for i in (3, 4) if sys.monitoring.get_tool(i) is not None],
    distributions=len(STATE.distributions),
    started_on=STATE.started_on,
    lookups=info["hits"] + info["misses"] + info["uncached"],
)))
"""


@pytest.mark.parametrize("mode", ["off", "on"])
def test_the_watch_and_its_hooks_run_only_with_the_trace_cache(mode, tmp_path):
    from _fresh_process import run_python

    flags = f"jax_ofg__trace_cache={mode},base_compiledir={tmp_path / 'cd'}"
    done = run_python(
        ["-c", WATCH_PROBE], tmp_path, timeout=300, env={"PYTENSOR_FLAGS": flags}
    )
    state = json.loads(done.stdout.strip().splitlines()[-1])
    if mode == "off":  # nothing of the cache runs
        assert state == {
            "audit_hook": False,
            "tool": None,
            "tools_in_use": [],
            "distributions": 0,
            "started_on": False,
            "lookups": 0,
        }
    else:
        assert state["audit_hook"] and state["tool"] in (3, 4)
        assert state["tools_in_use"] == [state["tool"]]
        assert state["distributions"] >= 1 and state["lookups"] > 0
        assert state["started_on"]
