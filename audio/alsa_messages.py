"""ALSA's library messages go to our log instead of straight to stderr.

libasound prints its errors itself ("ALSA lib pcm.c:8570:(snd_pcm_recover) underrun
occurred" when a playback buffer runs dry; a page of "cannot find card" lines when
PortAudio probes a machine without a sound card). Both describe conditions we handle
ourselves (the sink counts underflows; a missing device is a DeviceError), so they are
routed to the ``audio.alsa`` logger at DEBUG. libasound's handler is process-wide, so
it is installed once, before PortAudio starts, and kept for the life of the process
(libasound may call it until PortAudio terminates at exit).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import logging
from typing import Any

__all__ = ["route_alsa_messages"]


def route_alsa_messages() -> bool:
    """Install the handler (idempotent); False where there is no libasound."""
    return _handler() is not None


@functools.cache  # holds the C callback for the life of the process (see above)
def _handler() -> Any:
    name = ctypes.util.find_library("asound")
    if name is None:
        return None
    try:
        lib = ctypes.CDLL(name)
        set_handler = lib.snd_lib_error_set_handler
    except (OSError, AttributeError):
        return None
    log = logging.getLogger("audio.alsa")
    # void handler(const char *file, int line, const char *function, int err,
    #              const char *fmt, ...): the format's arguments are not readable from
    # Python (a va_list), so the format itself is logged.
    prototype = ctypes.CFUNCTYPE(None, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p,
                                 ctypes.c_int, ctypes.c_char_p)

    def handler(file: bytes | None, line: int, function: bytes | None, err: int,
                fmt: bytes | None) -> None:
        if log.isEnabledFor(logging.DEBUG):
            log.debug("ALSA %s:%d (%s) %s%s", _text(file), line, _text(function), _text(fmt),
                      f" [error {err}]" if err else "")

    callback = prototype(handler)
    set_handler.argtypes = [prototype]
    set_handler.restype = ctypes.c_int
    set_handler(callback)
    return (lib, callback)


def _text(raw: bytes | None) -> str:
    return raw.decode("utf-8", "replace") if raw else "?"
