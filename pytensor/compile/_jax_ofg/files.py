"""Cache files written whole or not at all, and what a killed writer leaves.

Both disk caches (traces in ``cache/storage``, compiled programs through
``patches/xla_cache_writes``) write an entry to a temporary file in the entry's folder and
rename it into place, so a reader sees the whole entry or none. A process
killed between the two steps leaves its temporary file, which no reader
takes for an entry (its name starts with a dot); the next write to the
folder removes such files once they are old enough that no live writer can
still own them. The developer notes, "The trace cache"; the how-to, "Ctrl-C
and faults".
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import time
from pathlib import Path


#: Seconds after which a temporary file is an orphan: no write takes this long.
ORPHAN_AGE = 3600.0


def write_whole(path: Path, data: bytes, prefix: str) -> None:
    """Write ``data`` to ``path`` through a temporary file named ``prefix*``.

    Raises the ``OSError`` of a failed write (a full disk, a quota, a folder
    removed meanwhile), after removing the temporary file; ``path`` is then
    untouched.

    >>> import tempfile
    >>> folder = Path(tempfile.mkdtemp())
    >>> write_whole(folder / "entry", b"abc", prefix=".tmp-")
    >>> (folder / "entry").read_bytes(), sorted(p.name for p in folder.iterdir())
    (b'abc', ['entry'])
    """
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=prefix)
    try:
        with os.fdopen(handle, "wb") as file:
            file.write(data)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


def remove_orphans(folder: Path, prefix: str) -> int:
    """Remove the temporary files ``prefix*`` in ``folder`` older than
    :data:`ORPHAN_AGE`; return how many went. Never raises.

    >>> import tempfile
    >>> folder = Path(tempfile.mkdtemp())
    >>> for name in (".tmp-old", ".tmp-new", "entry"):
    ...     _ = (folder / name).write_bytes(b"x")
    >>> os.utime(folder / ".tmp-old", (time.time() - 2 * ORPHAN_AGE,) * 2)
    >>> remove_orphans(folder, ".tmp-"), sorted(p.name for p in folder.iterdir())
    (1, ['.tmp-new', 'entry'])
    """
    now, removed = time.time(), 0
    try:
        with os.scandir(folder) as entries:
            found = [e for e in entries if e.name.startswith(prefix)]
    except OSError:
        return 0
    for entry in found:
        with contextlib.suppress(OSError):
            if now - entry.stat().st_mtime > ORPHAN_AGE:
                os.unlink(entry.path)
                removed += 1
    return removed
