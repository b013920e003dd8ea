"""``open_live_audio``: the echo processor gets the live-only settings, and a microphone
that cannot be opened leaves no speaker stream behind."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

import audio.sources
import audio.speaker_sink
from assistant.app.config import AppConfig
from assistant.loop.setup import LoopModels, open_live_audio
from audio.errors import DeviceError
from tests.audio.fake_streams import FakeOutputStream


@pytest.fixture
def speakers(monkeypatch: pytest.MonkeyPatch) -> list[FakeOutputStream]:
    """Output streams opened by ``SpeakerSink`` (PortAudio replaced by fakes)."""
    opened: list[FakeOutputStream] = []

    def open_output_stream(**kwargs: Any) -> FakeOutputStream:
        opened.append(FakeOutputStream(**kwargs))
        return opened[-1]

    device = SimpleNamespace(index=0, default_samplerate=48000.0)
    monkeypatch.setattr(audio.speaker_sink, "resolve_device", lambda spec, kind: device)
    monkeypatch.setattr(audio.speaker_sink, "open_output_stream", open_output_stream)
    monkeypatch.setattr(audio.sources, "resolve_device", lambda spec, kind: device)
    return opened


def _models() -> LoopModels:
    return SimpleNamespace(synthesizer=SimpleNamespace(sample_rate=22050))  # type: ignore[return-value]


def test_a_microphone_that_fails_to_open_closes_the_speaker(
        speakers: list[FakeOutputStream], monkeypatch: pytest.MonkeyPatch) -> None:
    def no_mic(**kwargs: Any) -> Any:
        raise DeviceError("the microphone is busy")

    monkeypatch.setattr(audio.sources, "open_input_stream", no_mic)
    with pytest.raises(DeviceError, match="busy"):
        open_live_audio(AppConfig(), _models())
    assert len(speakers) == 1 and speakers[0].closed


def test_the_echo_processor_gets_the_live_settings(
        speakers: list[FakeOutputStream], monkeypatch: pytest.MonkeyPatch) -> None:
    mics: list[Any] = []

    def open_input_stream(**kwargs: Any) -> Any:
        mics.append(SimpleNamespace(start=lambda: None, stop=lambda: None, close=lambda: None))
        return mics[-1]

    monkeypatch.setattr(audio.sources, "open_input_stream", open_input_stream)
    cfg = AppConfig.model_validate({"echo": {"mode": "gate", "aec_lead_ms": 35}})
    live = open_live_audio(cfg, _models())
    try:
        assert live.echo is not None and live.sink.tap == live.echo.push_reference
        assert live.echo.options.aec_lead_ms == 35
        assert live.echo.options.gate_margin_db == cfg.echo.gate_margin_db
    finally:
        live.mic.close()
        live.sink.close()
    assert speakers[0].closed
