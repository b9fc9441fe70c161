"""An insertion-ordered set: iteration in the order members were added.

The shell iterates sets of objects when it wakes, answers or closes them (connections,
waiters); a plain ``set`` of objects iterates in address order, which differs from one
run to the next. This one does not, so a seeded run of the whole-cluster simulation
replays exactly, and the shell treats members first come, first served.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, MutableSet
from typing import TypeVar

T = TypeVar("T")

__all__ = ["OrderedSet"]


class OrderedSet(MutableSet[T]):
    """A ``MutableSet`` backed by a dict (see the module doc)."""

    __slots__ = ("_items",)

    def __init__(self, items: Iterable[T] = ()) -> None:
        self._items: dict[T, None] = dict.fromkeys(items)

    def __contains__(self, item: object) -> bool:
        return item in self._items

    def __iter__(self) -> Iterator[T]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def add(self, item: T) -> None:
        self._items[item] = None

    def discard(self, item: T) -> None:
        self._items.pop(item, None)

    def __repr__(self) -> str:
        return f"OrderedSet({list(self._items)!r})"
