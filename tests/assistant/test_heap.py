"""``freeze_loaded``: what is alive after loading leaves the collector's full passes."""

from __future__ import annotations

import gc

from assistant.app.heap import freeze_loaded


class _Node:
    def __init__(self) -> None:
        self.me = self  # a cycle: only the cyclic collector could ever free it


def test_objects_alive_at_the_freeze_are_no_longer_walked_and_garbage_before_it_is_freed() -> None:
    loaded = [_Node() for _ in range(5000)]
    garbage = [_Node() for _ in range(100)]
    del garbage  # cyclic garbage: the collection before the freeze frees it
    try:
        frozen = freeze_loaded()
        assert frozen >= len(loaded)
        tracked = {id(o) for o in gc.get_objects()}
        assert not any(id(node) in tracked for node in loaded)
        assert not any(isinstance(o, _Node) for o in gc.get_objects())
        later = [_Node() for _ in range(10)]  # allocated after the freeze: walked as usual
        assert sum(isinstance(o, _Node) for o in gc.get_objects()) == len(later)
    finally:
        gc.unfreeze()  # the rest of the suite loads and drops models
    assert all(id(node) in {id(o) for o in gc.get_objects()} for node in loaded[:10])
