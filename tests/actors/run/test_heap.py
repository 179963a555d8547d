"""The run's loop freezes the heap it was built with and leaves the process as it found it."""

import gc

from actors.run.heap import frozen_heap


def test_the_heap_is_frozen_inside_and_unfrozen_after():
    before = gc.get_freeze_count()
    kept = [[] for _ in range(1000)]  # alive at the freeze: out of the collector's sight
    with frozen_heap() as frozen:
        assert frozen >= before + len(kept)
        made = [[] for _ in range(1000)]  # allocated after it: left to the collector
        assert gc.get_freeze_count() <= frozen and made
    assert gc.get_freeze_count() == before


def test_the_heap_is_unfrozen_when_the_loop_fails():
    before = gc.get_freeze_count()
    try:
        with frozen_heap():
            raise RuntimeError("a step failed")
    except RuntimeError:
        pass
    assert gc.get_freeze_count() == before
