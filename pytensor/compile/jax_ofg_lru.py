"""A bounded, thread-safe memo: the in-process caches of this package.

Jitted functions, traced output types, abstract pullbacks and ops per call
signature are kept in :class:`BoundedCache`\\ s, so a long session that builds
many models does not keep every trace alive.

Registers nothing.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any


class BoundedCache:
    """A thread-safe LRU mapping whose values are built on a miss.

    Two threads missing the same key may both build; the first value stored
    wins and both get it.

    Examples
    --------
    >>> cache = BoundedCache(2)
    >>> cache.get("a", lambda: 1), cache.get("a", lambda: 2)
    (1, 1)
    >>> _ = cache.get("b", lambda: 3), cache.get("c", lambda: 4)
    >>> len(cache), cache.get("a", lambda: 5)  # "a" was the least recently used
    (2, 5)
    """

    def __init__(self, size: int):
        self.size = size
        self._entries: OrderedDict = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: Hashable, build: Callable[[], Any]) -> Any:
        """The value under ``key``, built by ``build()`` if there is none."""
        with self._lock:
            value = self._entries.get(key)
            if value is not None:
                self._entries.move_to_end(key)
                return value
        value = build()
        with self._lock:
            value = self._entries.setdefault(key, value)
            if len(self._entries) > self.size:
                self._entries.popitem(last=False)
        return value

    def peek(self, key: Hashable) -> Any:
        """The value under ``key``, or None (marks it recently used)."""
        with self._lock:
            value = self._entries.get(key)
            if value is not None:
                self._entries.move_to_end(key)
            return value

    def put(self, key: Hashable, value: Any) -> None:
        """Keep ``value`` under ``key``, replacing what was there."""
        with self._lock:
            self._entries[key] = value
            self._entries.move_to_end(key)
            if len(self._entries) > self.size:
                self._entries.popitem(last=False)

    def pop(self, key: Hashable) -> None:
        with self._lock:
            self._entries.pop(key, None)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)
