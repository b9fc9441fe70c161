"""A dict that counts the keys its iterations yield: tests that a change's work is that
of the change, not a walk over everything (issue 33)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any


class CountingDict(dict):  # type: ignore[type-arg]
    """``walked``: how many keys iterating this dict has yielded (lookups are not counted)."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.walked = 0

    def __iter__(self) -> Iterator[Any]:
        for k in super().__iter__():
            self.walked += 1
            yield k
