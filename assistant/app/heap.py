"""Keep the garbage collector's full passes off the audio path.

Loaded models leave ~400,000 objects tracked by Python's cyclic garbage collector
(transformers modules, tokenizer tables, ...). None of them ever becomes garbage, but
every full (oldest-generation) collection walks all of them: ~210 ms on this 2-core
machine, holding the GIL -- a stall for the audio callbacks, the ASR thread and the
daemon's event loop, once every few minutes of a session (it was the daemon's
unexplained 250-290 ms event-loop lag). :func:`freeze_loaded` moves everything alive
after loading into the permanent generation (``gc.freeze``, Python 3.7+), so later
collections walk only what the session allocated.
"""

from __future__ import annotations

import gc

__all__ = ["freeze_loaded"]


def freeze_loaded() -> int:
    """Collect once, then freeze every object alive now; returns how many are frozen.

    Call once, after the models are loaded. Frozen objects are never collected, so what
    is loaded and later dropped stays in memory if it is cyclic: not for code that loads
    models over and over (tests).
    """
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()
