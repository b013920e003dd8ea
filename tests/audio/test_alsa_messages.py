"""ALSA's own error messages go to the log, not to stderr."""

from __future__ import annotations

import ctypes
import ctypes.util
import logging

import pytest

from audio.alsa_messages import route_alsa_messages


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def test_an_alsa_error_is_logged_not_printed(capfd: pytest.CaptureFixture[str],
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    name = ctypes.util.find_library("asound")
    if name is None:
        pytest.skip("no libasound on this machine")
    log = logging.getLogger("audio.alsa")
    records = _Records()
    monkeypatch.setattr(log, "handlers", [records])
    monkeypatch.setattr(log, "propagate", False)
    monkeypatch.setattr(log, "level", logging.DEBUG)
    assert route_alsa_messages() and route_alsa_messages()  # idempotent
    lib = ctypes.CDLL(name)
    pcm = ctypes.c_void_p()
    # An unknown PCM name: libasound reports it through its error handler.
    assert lib.snd_pcm_open(ctypes.byref(pcm), b"no_such_pcm_for_tests", 0, 0) < 0
    assert capfd.readouterr().err == ""
    assert any("Unknown PCM" in m for m in records.messages), records.messages
