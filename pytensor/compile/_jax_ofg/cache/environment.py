"""What every traced program depends on besides its function: the environment.

:func:`environment_fingerprint` (versions, this project's source, JAX options
and environment variables) is part of every trace-cache key. Registers
nothing.
"""

from __future__ import annotations

import functools
import os
import platform
import sys
from collections.abc import Iterable
from pathlib import Path

import jax
import numpy as np

from pytensor.compile._jax_ofg import compat
from pytensor.compile._jax_ofg.cache.code_origin import is_inside
from pytensor.compile._jax_ofg.cache.fingerprints import digest
from pytensor.compile._jax_ofg.cache.storage import STATE
from pytensor.compile._jax_ofg.flags import FLAGS


__all__ = [
    "KEYED_OWN_FLAGS",
    "UNKEYED_FLAGS",
    "describe_environment",
    "environment_fingerprint",
    "installed_distributions",
    "installed_distributions_changed",
    "project_files",
]

#: PyTensor flags that no key holds, so a trace in which the user's code reads
#: one is not kept (``cache.watch``): those that say where caches
#: live, not what a trace computes (processes sharing a cache copied
#: elsewhere share keys); those PyTensor sets around its own rewrites while
#: it compiles (a trace made then would have another key than the same trace
#: made outside); and those whose default probes the machine for C
#: compilation (reading them for a key would run the probe). This package's
#: own flags (``jax_ofg__*``) neither, except those in :data:`KEYED_OWN_FLAGS`.
UNKEYED_FLAGS = frozenset(
    {
        "compiledir",
        "base_compiledir",
        "compiledir_format",
        "mode",
        "traceback__limit",
        "optdb__max_use_ratio",
        "optimizer_verbose",
        "warn_float64",
        *compat.probed_flags(),
    }
)


#: This package's flags that change the programs it lowers: part of every key
#: (``keyed`` in the table of ``flags``).
KEYED_OWN_FLAGS = frozenset(flag.name for flag in FLAGS if flag.keyed)


#: JAX options that differ between runs for reasons that do not change a
#: traced program: caches, logging, dumps, tracebacks and source locations
#: (metadata only), distributed-runtime plumbing.
_IRRELEVANT_CONFIG_PREFIXES = (
    "jax_compilation_cache_",
    "jax_persistent_cache_",
    "jax_dump_ir_",
    "jax_log",
    "jax_mtls_",
    "jax_cross_host_",
    "jax_distributed_",
    "jax_cpu_get_",
    "jax_share_binary_",
    "jax_pgle_",
)
_IRRELEVANT_CONFIG = frozenset(
    {
        "jax_enable_compilation_cache",
        "jax_raise_persistent_cache_errors",
        "jax_explain_cache_misses",
        "jax_debug_log_modules",
        "jax_pprint_use_color",
        "jax_traceback_filtering",
        "jax_traceback_in_locations_limit",
        "jax_include_full_tracebacks_in_locations",
        "jax_hlo_source_file_canonicalization_regex",
        "jax_tracer_error_num_traceback_frames",
        "jax_captured_constants_report_frames",
        "jax_captured_constants_warn_bytes",
        "jax_include_debug_info_in_dumps",
        "jax_compiler_detailed_logging_min_ops",
        "jax_send_traceback_to_runtime",
        "jax_source_url_schema",
        "jax_check_proxy_envs",
        "jax_enable_pgle",
        "jax_enable_preemption_service",
        "jax_debug_leaked_clients_on_clear_backends",
    }
)

#: Where this project's modules live, relative to the ``pytensor`` package.
_PROJECT_GLOBS = (
    "compile/jax_ofg.py",
    "compile/_jax_ofg/**/*.py",
    "link/*/dispatch/jax_ofg.py",
)


def _relevant_config(name: str) -> bool:
    return name not in _IRRELEVANT_CONFIG and not name.startswith(
        _IRRELEVANT_CONFIG_PREFIXES
    )


def _relevant_variable(name: str) -> bool:
    if name.startswith("JAX_"):
        return _relevant_config(name.lower())
    return name == "XLA_FLAGS" or name.startswith("EQX_")


@functools.cache
def _versions() -> tuple[tuple[str, str], ...]:
    import jaxlib

    import pytensor

    return (
        (
            "python",
            f"{platform.python_implementation()} {platform.python_version()} "
            f"{sys.implementation.cache_tag}",
        ),
        ("jax", jax.__version__),
        ("jaxlib", jaxlib.__version__),
        ("pytensor", pytensor.__version__),
        ("numpy", np.__version__),
    )


@functools.cache
def _default_backend() -> str:
    return jax.default_backend()


def _file_digest(path: str) -> str:
    """Return the :func:`digest` of a file's content, read again when its stat changes."""
    stat = os.stat(path)
    # The inode and change time too: a file replaced or edited within the
    # modification time's resolution keeps its size and modification time.
    signature = (stat.st_ino, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns)
    cached = STATE.source_digests.get(path)
    if cached is not None and cached[0] == signature:
        return cached[1]
    text = digest(Path(path).read_bytes())
    STATE.source_digests[path] = (signature, text)
    return text


def project_files() -> dict[str, str]:
    """This project's modules, by name, with their files: the copy this module is in.

    Found beside this file, whatever is imported yet (importing a module to
    ask where it is would import PyTensor's JAX backend with our JAX
    dispatch: a second of start-up).

    >>> "pytensor.compile._jax_ofg.cache.environment" in project_files()
    True
    """
    return dict(_project_files())


@functools.cache
def _project_files() -> tuple[tuple[str, str], ...]:
    root = Path(__file__).resolve().parents[4]  # pytensor/compile/_jax_ofg/cache/
    return tuple(
        sorted(
            (_dotted_name(path.relative_to(root)), str(path))
            for pattern in _PROJECT_GLOBS
            for path in root.glob(f"pytensor/{pattern}")
        )
    )


def _dotted_name(relative: Path) -> str:
    """``pytensor/compile/_jax_ofg/host/op.py`` -> ``pytensor.compile._jax_ofg.host.op``
    (a package's ``__init__.py``: the package)."""
    parts = relative.with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _scan_distributions(path: tuple[str, ...]) -> tuple[str, ...]:
    """Every distribution installed on ``path``: its metadata folder's name
    (``name-version.dist-info``), with how it was installed when not from an
    index (``direct_url.json``: a VCS commit, an archive's hash, a folder)."""
    found = []
    for entry in _outside_packages(os.path.abspath(p or ".") for p in path):
        try:
            with os.scandir(entry) as listing:
                names = [e.name for e in listing if e.name.endswith(_METADATA_DIRS)]
        except OSError:
            continue
        for name in names:
            try:
                direct = Path(entry, name, "direct_url.json").read_text()
            except OSError:
                direct = ""
            found.append(f"{name}{'|' + direct.strip() if direct else ''}")
    return tuple(sorted(found))


_METADATA_DIRS = (".dist-info", ".egg-info")


def _outside_packages(entries: Iterable[str]) -> list[str]:
    """Return the distinct ``entries``, but those inside a package of another entry.

    A folder inside an installed package is that package's own
    (``site-packages/setuptools/_vendor``, which setuptools puts on
    ``sys.path`` when imported): what it holds is pinned by the package's
    distribution, and a scan of it would change every key the moment the
    package is imported. (An entry below another that is no package, as
    a virtual environment below the working directory, is scanned.)
    """
    distinct = list(dict.fromkeys(entries))

    def in_a_package(entry: str) -> bool:
        for other in distinct:
            if is_inside(entry, [other]):
                top = os.path.relpath(entry, other).split(os.sep)[0]
                if os.path.isfile(os.path.join(other, top, "__init__.py")):
                    return True
        return False

    return [entry for entry in distinct if not in_a_package(entry)]


def installed_distributions() -> tuple[str, ...]:
    """Every installed distribution, as this process first saw it.

    Library code is keyed by the whole installed environment, not by the
    release of the library a function comes from: an upgrade of any package
    a trace could reach (lineax under an unchanged diffrax) gives other keys.
    Taken once per process (``install()`` takes it at import): the modules in
    memory are those of the environment the process started with.

    >>> any(d.startswith("numpy-") for d in installed_distributions())
    True
    """
    path = tuple(sys.path)
    found = STATE.distributions.get(path)
    if found is None:
        found = STATE.distributions.setdefault(path, _scan_distributions(path))
    return found


def installed_distributions_changed() -> bool:
    """Return whether packages were installed, removed or upgraded since this process
    first looked: its modules in memory may then not be what the disk holds, and no
    trace is kept (it would be keyed by the wrong environment).
    """
    return _scan_distributions(tuple(sys.path)) != installed_distributions()


def _pytensor_flags() -> list[str]:
    """Return the PyTensor flags a trace may read (all but :data:`UNKEYED_FLAGS` and
    this package's own), with their values now.
    """
    return [
        f"{name}={value!r}"
        for name, value in compat.pytensor_flags()
        if name not in UNKEYED_FLAGS
        and (not name.startswith("jax_ofg__") or name in KEYED_OWN_FLAGS)
    ]


def describe_environment() -> str:
    """Return the readable form of :func:`environment_fingerprint`.

    Calling it the first time initialises JAX's backends (for the default
    platform): do it when a program is about to be compiled anyway.

    >>> "jax_enable_x64=" in describe_environment()
    True
    """
    parts = [f"{name}={version}" for name, version in _versions()]
    parts.append(f"backend={_default_backend()}")
    sources = ", ".join(
        f"{name}:{_file_digest(path)}" for name, path in project_files().items()
    )
    parts.append(f"project=[{sources}]")
    values = jax.config.values
    # bools, numbers, strings, None and enums: repr is exact
    parts.extend(f"{name}={values[name]!r}" for name in _relevant_options(len(values)))
    parts.extend(f"${name}={value!r}" for name, value in _variables())
    parts.extend(f"pytensor.config.{flag}" for flag in _pytensor_flags())
    digests = digest("\n".join(installed_distributions()))
    parts.append(f"installed={digests}")
    return "\n".join(parts)


@functools.cache
def _relevant_options(count: int) -> tuple[str, ...]:
    # keyed by the number of options: plugins may define more later
    return tuple(sorted(n for n in jax.config.values if _relevant_config(n)))


@functools.cache
def _variables() -> tuple[tuple[str, str], ...]:
    # JAX, XLA and equinox read them when they start: later changes do not
    # take effect, so the values at the first call are the ones in force.
    return tuple(sorted((k, v) for k, v in os.environ.items() if _relevant_variable(k)))


def environment_fingerprint() -> str:
    """Return a digest of what every traced program depends on besides its function.

    Python, jax, jaxlib, PyTensor and numpy versions; every installed
    distribution (:func:`installed_distributions`); this project's source
    (:func:`project_files`); the JAX options that change traced programs
    (``jax_enable_x64``, ...: all but caches, logging and source locations);
    PyTensor's flags (``floatX``...: all but :data:`UNKEYED_FLAGS`); the
    default backend platform; and the environment variables JAX, XLA and
    equinox read (``JAX_*``, ``XLA_FLAGS``, ``EQX_*``). Versions, the
    installed distributions, variables and the backend are read once;
    options, flags and source files (when their stat changed) at every call.

    >>> environment_fingerprint() == environment_fingerprint()
    True
    """
    return digest(describe_environment())
