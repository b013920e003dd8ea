"""The ear: echo handling and VAD over input frames, as turn-manager inputs.

:class:`Listener` takes 16 kHz input chunks, applies echo handling (with the far end
as heard by the sink), runs :class:`audio.vad.Vad`, and returns turn-manager inputs
(:mod:`assistant.turns.events`) in time order, plus the audio of the open utterance for ASR.
Each VAD frame also becomes a :class:`~assistant.turns.events.VoiceFrame` (was it voiced?),
which is what barge-in counts; the frame decision mirrors the VAD's own (classifier,
level above the noise floor, spectral flatness), read back through a recording
classifier. Synchronous and deterministic.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from assistant.turns.events import (
    EndOfTurn,
    ShortPause,
    SpeechResumed,
    SpeechStarted,
    TurnInput,
    VoiceFrame,
)
from audio import vad as vad_mod
from audio.chunk import AudioChunk
from audio.echo import EchoProcessor

__all__ = ["UtteranceOpened", "UtteranceAudio", "UtterancePaused", "UtteranceClosed",
           "ListenerOutput", "Listener"]


@dataclass(frozen=True)
class UtteranceOpened:
    """VAD opened an utterance: ``pcm`` runs from ``start_sample`` (onset minus padding)."""

    pcm: npt.NDArray[np.float32]
    start_sample: int


@dataclass(frozen=True)
class UtteranceAudio:
    """More audio of the open utterance."""

    pcm: npt.NDArray[np.float32]
    start_sample: int


@dataclass(frozen=True)
class UtterancePaused:
    """The open utterance went quiet at ``speech_end_sample`` (``vad.pause_onset_ms`` ago):
    a pause may be starting; a :class:`~assistant.turns.events.ShortPause` follows if it
    lasts, with the same start."""

    speech_end_sample: int


@dataclass(frozen=True)
class UtteranceClosed:
    """VAD closed the utterance; speech ended at ``speech_end_sample``."""

    speech_end_sample: int


HIDDEN_GAP_MS = 400
"""A gap this long (a comma's pause: "Actually, [300 ms] my brother") does not end a run
of speech the gate hid. Only playback mutes, so the run never reaches before the reply."""
ECHO_TEST_MS = 300
"""The least raw audio the hidden start's echo test correlates (shorter, chance peaks rise toward the 0.15 bar)."""

ListenerOutput = TurnInput | UtteranceOpened | UtteranceAudio | UtterancePaused | UtteranceClosed


class _RecordingClassifier:
    """Passes frames to the real classifier and remembers its last answer."""

    def __init__(self, inner: vad_mod.FrameClassifier) -> None:
        self.inner = inner
        self.last = False

    def is_speech(self, frame: npt.NDArray[np.float32]) -> bool:
        self.last = bool(self.inner.is_speech(frame))
        return self.last

    def reset(self) -> None:
        self.inner.reset()


class Listener:
    """See the module docstring."""

    def __init__(self, vad_options: vad_mod.VadOptions, echo: EchoProcessor | None = None,
                 classifier: vad_mod.FrameClassifier | None = None,
                 hold_muted_pauses: bool = True) -> None:
        self.options = vad_options
        inner = classifier if classifier is not None else vad_mod.make_classifier(vad_options)
        self._classifier = _RecordingClassifier(inner)
        self.vad = vad_mod.Vad(vad_options, self._classifier)
        self.echo = echo
        self._frame = vad_options.frame_samples
        self._pending = np.zeros(0, np.float32)
        self._pending_start = 0
        self._voiced: deque[tuple[int, bool]] = deque(maxlen=200)  # (frame start, voiced)
        # The half-duplex gate silences mic frames to keep the VAD from hearing the
        # assistant, but the user's words must reach ASR whole: with the gate, the
        # utterance audio (prefix padding included) is the ungated mic signal, so a
        # barge-in does not lose its first syllable. (AEC output is clean: used as is.)
        self._raw_utterance = echo is not None and echo.options.mode == "gate"
        self._raw_pending = np.zeros(0, np.float32)
        self._raw_frames: deque[tuple[int, npt.NDArray[np.float32]]] = deque(maxlen=200)
        # Per frame: did the gate mute sound there (the raw mic loud over the room's
        # floor)? Speech it hid just before the VAD's onset began that much earlier.
        self._hidden: deque[tuple[int, bool]] = deque(maxlen=200)
        self._closed_at = 0  # where the last utterance's speech ended: no run reaches back over it
        # At most the gate's window (its echo tail after playback stops) and 300 ms more
        # (the buffers a barge-in takes to stop playback).
        self._hold_cap = (0 if echo is None or not hold_muted_pauses else
                          echo.options.sample_rate * (echo.options.reference_window_ms + 300) // 1000)
        self.frames = 0
        self.pause_start_sample = 0
        """Where the latest short pause began (the end of the speech before it)."""

    @property
    def rate(self) -> int:
        return self.options.sample_rate

    def ms(self, samples: int) -> int:
        return samples * 1000 // self.rate

    @property
    def hears_speaker(self) -> bool:
        """The speaker's echo was found in the microphone (see
        :attr:`audio.echo.EchoProcessor.echo_heard`)."""
        return self.echo is not None and self.echo.echo_heard is True

    def process(self, chunk: AudioChunk) -> list[ListenerOutput]:
        """Feed one input chunk (at the VAD rate); return what it caused, in order."""
        raw = np.asarray(chunk.to_mono().to_float32().pcm, np.float32)
        if self.echo is not None:
            chunk = self.echo.process(chunk)
        pcm = np.asarray(chunk.to_mono().to_float32().pcm, np.float32)
        if self._pending.size == 0 or self._pending_start + self._pending.size != chunk.start_sample:
            self._pending, self._pending_start = pcm, chunk.start_sample
            self._raw_pending = raw if self._raw_utterance else self._raw_pending
        else:
            self._pending = np.concatenate([self._pending, pcm])
            if self._raw_utterance:
                self._raw_pending = np.concatenate([self._raw_pending, raw])
        out: list[ListenerOutput] = []
        n = self._frame
        while self._pending.size >= n:
            frame, start = self._pending[:n], self._pending_start
            self._pending = self._pending[n:]
            self._pending_start += n
            heard = frame
            if self._raw_utterance and self._raw_pending.size >= n:
                heard, self._raw_pending = self._raw_pending[:n], self._raw_pending[n:]
                self._raw_frames.append((start, heard))
                # Muted by the gate, not quiet: a pause of the user's made of such frames
                # may be them talking under the echo (the tail after a barge-in stops
                # the reply), so it ends the turn only that much later (bounded).
                muted = int(np.count_nonzero((frame == 0.0) & (heard != 0.0)))
                if muted and self._hold_cap:
                    self.vad.machine.hold(muted, self._hold_cap)
                self._hidden.append((start, 2 * muted >= n and self._loud(vad_mod.frame_energy_dbfs(heard))))
            out.extend(self._frame_step(frame, start, heard))
        return out

    def set_pause_limit(self, ms: int) -> None:
        """End the user's turn after ``ms`` of silence in the current pause."""
        self.vad.machine.set_pause_limit(ms)

    def flush(self) -> list[ListenerOutput]:
        """End of input: close an open utterance."""
        events = self.vad.flush()
        out: list[ListenerOutput] = []
        for ev in events:
            out.extend(self._translate(ev))
        return out

    def _frame_step(self, frame: npt.NDArray[np.float32], start: int,
                    heard: npt.NDArray[np.float32]) -> list[ListenerOutput]:
        was_open = self.vad.in_speech
        events = self.vad.process(AudioChunk(frame, self.rate, start))
        self.frames += 1
        feats = vad_mod.frame_features(frame, self.rate)
        voiced = (self._classifier.last and self._loud(feats.energy_dbfs)
                  and feats.flatness <= self.options.max_flatness)
        self._voiced.append((start, voiced))
        # The frame first: a SpeechStarted below already counts it in its voiced_ms.
        out: list[ListenerOutput] = [VoiceFrame(self.ms(start), voiced, self.ms(self._frame))]
        if was_open and self.vad.in_speech:
            out.append(UtteranceAudio(heard.copy(), start))
        for ev in events:
            out.extend(self._translate(ev))
        return out

    def _translate(self, ev: vad_mod.VadEvent) -> list[ListenerOutput]:
        t = self.ms(ev.detected_sample)
        if isinstance(ev, vad_mod.SpeechStarted):
            voiced_ms = sum(self.ms(self._frame) for s, v in self._voiced
                            if v and ev.start_sample <= s < ev.detected_sample)
            pcm = self._ungated(np.asarray(ev.pcm, np.float32), ev.audio_start_sample)
            audio_start = ev.audio_start_sample
            onset = self._hidden_onset(ev.start_sample, ev.detected_sample)
            if onset is not None:  # the hidden start reaches ASR too, with its padding
                lo = max(onset - self.options.ms_to_samples(self.options.prefix_padding_ms),
                         self._raw_frames[0][0])
                before = self._raw_span(lo, audio_start) if lo < audio_start else None
                if before is not None:
                    pcm, audio_start = np.concatenate([before, pcm]), lo
            echo_free = self.echo is not None and self.echo.echo_heard is False
            return [UtteranceOpened(pcm, audio_start),
                    SpeechStarted(t, voiced_ms=voiced_ms, echo_free=echo_free,
                                  onset_ms=None if onset is None else self.ms(onset))]
        if isinstance(ev, vad_mod.PauseOnset):
            return [UtterancePaused(ev.start_sample)]
        if isinstance(ev, vad_mod.ShortPause):
            self.pause_start_sample = ev.start_sample
            return [ShortPause(t)]
        if isinstance(ev, vad_mod.SpeechResumed):
            return [SpeechResumed(t)]
        if isinstance(ev, vad_mod.SpeechStopped):
            self._closed_at = ev.end_sample
            return [UtteranceClosed(ev.end_sample),
                    EndOfTurn(t, speech_end_ms=self.ms(ev.end_sample))]
        return []

    def _loud(self, level_dbfs: float) -> bool:
        """Whether a frame at ``level_dbfs`` is over the room's floor as the VAD counts loud."""
        opts = self.options
        return level_dbfs >= max(opts.energy_floor_dbfs,
                                 self.vad.noise_floor_dbfs + opts.noise_margin_db)

    def _hidden_onset(self, start: int, detected: int) -> int | None:
        """Where speech the VAD heard from ``start`` really began, if the gate muted its
        beginning: the first frame of the run of muted loud frames (gaps of at most
        :data:`HIDDEN_GAP_MS`, none before the last utterance's end) just before
        ``start`` -- unless that sound may be the
        reply's echo (:meth:`audio.echo.EchoProcessor.may_be_echo`, asked on the raw mic
        from there to ``detected``, :data:`ECHO_TEST_MS` at the least). None: nothing hidden."""
        if not self._raw_utterance or self.echo is None or not self._raw_frames:
            return None
        onset, gap, max_gap = None, 0, self.rate * HIDDEN_GAP_MS // 1000
        for frame_start, hidden in reversed(self._hidden):
            if frame_start >= start:
                continue
            if frame_start < self._closed_at:
                break
            if hidden:
                onset, gap = frame_start, 0
            else:
                gap += self._frame
                if gap > max_gap:
                    break
        if onset is None:
            return None
        lo = max(min(onset, detected - self.rate * ECHO_TEST_MS // 1000), self._raw_frames[0][0])
        raw = self._raw_span(lo, detected)
        if raw is None or self.echo.may_be_echo(raw, lo):
            return None
        return onset

    def _raw_span(self, lo: int, hi: int) -> npt.NDArray[np.float32] | None:
        """The kept raw mic samples ``[lo, hi)``; None where they are not all kept."""
        parts = [(s, f) for s, f in self._raw_frames if s + f.size > lo and s < hi]
        if not parts or parts[0][0] > lo:
            return None
        pcm = np.concatenate([f for _, f in parts])
        if parts[-1][0] + parts[-1][1].size - parts[0][0] != pcm.size:
            return None  # a hole in the timeline
        return pcm[lo - parts[0][0]: hi - parts[0][0]]

    def _ungated(self, pcm: npt.NDArray[np.float32], start: int) -> npt.NDArray[np.float32]:
        """``pcm`` (the VAD's view from ``start``) with the ungated mic audio where kept."""
        if not self._raw_utterance:
            return pcm
        out = pcm.copy()
        for frame_start, frame in self._raw_frames:
            lo = frame_start - start
            if lo < 0 or lo + frame.size > out.size:
                continue
            out[lo:lo + frame.size] = frame
        return out
