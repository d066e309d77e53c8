"""Install a one-module distribution into a folder, as pip would, for tests of keys.

A library is keyed by its distribution's name and version; these tests install
one, upgrade it, or install it from a local folder (whose version proves
nothing) without pip or an index.
"""

from __future__ import annotations

import json
import shutil
import textwrap
from pathlib import Path


def install_distribution(
    site: Path, name: str, version: str, source: str, *, local: bool = False
) -> None:
    """Install module ``name`` with ``source`` into ``site`` as version ``version``.

    Any other version of it is removed first, with the module's bytecode.
    ``local`` records it as installed from a local folder (``direct_url.json``).

    >>> import tempfile
    >>> site = Path(tempfile.mkdtemp())
    >>> install_distribution(site, "demo", "1.0", "X = 1\\n")
    >>> sorted(p.name for p in site.iterdir())
    ['demo', 'demo-1.0.dist-info']
    """
    for old in site.glob(f"{name}-*.dist-info"):
        shutil.rmtree(old)
    package = site / name
    package.mkdir(parents=True, exist_ok=True)
    (package / "__init__.py").write_text(textwrap.dedent(source))
    shutil.rmtree(package / "__pycache__", ignore_errors=True)
    info = site / f"{name}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
    )
    (info / "RECORD").write_text(
        f"{name}/__init__.py,,\n{info.name}/METADATA,,\n{info.name}/RECORD,,\n"
    )
    (info / "INSTALLER").write_text("pip\n")
    if local:
        (info / "direct_url.json").write_text(
            json.dumps({"url": f"file://{site}", "dir_info": {}})
        )
