"""The server shell tunes the cyclic collector once at start-up (cli._tune_gc): what
exists then is frozen out of every generation and the young threshold is raised."""

from __future__ import annotations

import gc

from hightide import cli


def test_tune_gc_freezes_what_exists_and_raises_the_young_threshold():
    before = gc.get_threshold()
    try:
        gc.unfreeze()
        cli._tune_gc()
        assert gc.get_threshold() == cli.GC_THRESHOLD
        assert cli.GC_THRESHOLD[0] > before[0]
        assert gc.get_freeze_count() > 1000  # the modules and classes imported so far
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)
