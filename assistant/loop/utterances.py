"""The user's open utterance, as the ASR worker sees it.

:class:`UtteranceTracker` numbers utterances, forwards their audio to the ASR worker,
and carries out the turn manager's ASR actions with the right audio span: a preview at
a short pause (the speech plus the same tail a final decode will see, so a final of the
same audio is the same text and a speculation can hit), the final at the end of turn,
or a discard. It also holds display partials while the user is quiet, so that no
partial re-decode is in flight on the worker when the pause asks for the preview, and
decodes that preview's audio early, when the silence starts (``vad.pause_onset_ms``):
on a 2-core CPU the decode takes ~150 ms, which then runs while the pause is still
being confirmed, not after it (the tail is at most the onset, so its audio is there).
That early decode is posted too, so a speculation can start on it at once.

Pure bookkeeping over an :class:`~assistant.loop.asr_worker.AsrWorker`; runs on the
event loop.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from assistant.loop.asr_worker import AsrWorker

__all__ = ["UtteranceTracker", "decode_tail_ms"]


def decode_tail_ms(max_tail_ms: int, short_pause_ms: int, pause_onset_ms: int) -> int:
    """Silence after the speech that preview and final decodes include: at most
    ``max_tail_ms``, and no more than a pause has when its preview is decoded (at the
    onset when there is one, else at the short pause), so that audio is there."""
    tail = min(max_tail_ms, short_pause_ms)
    return min(tail, pause_onset_ms) if 0 < pause_onset_ms < short_pause_ms else tail


@dataclass
class _Utt:
    utt_id: int
    end_sample: int | None = None
    """End of its speech, once the VAD closed it."""


class UtteranceTracker:
    """See the module docstring. Times are samples at the listener's ``rate``."""

    def __init__(self, asr: AsrWorker, *, rate: int, quiet_hold_ms: int) -> None:
        self.asr = asr
        self.rate = rate
        self.quiet_hold_ms = quiet_hold_ms
        self._next_id = 1
        self._utt: _Utt | None = None
        self._finals: list[int] = []
        self._pause_end_sample = 0
        self._quiet_ms = 0
        self._quiet_hold = False

    # ------------------------------------------------------------------ queries

    def is_current(self, utt_id: int) -> bool:
        return self._utt is not None and self._utt.utt_id == utt_id

    @property
    def settled(self) -> bool:
        """No utterance open and no final transcript pending."""
        return not self._finals and (self._utt is None or self._utt.end_sample is not None)

    # ------------------------------------------------------------------ listener input

    def open(self, pcm: npt.NDArray[np.float32], start_sample: int, *,
             partials: bool = True) -> None:
        """A new utterance; ``partials``: with display partials (else its decodes are
        the previews and the final only)."""
        utt = _Utt(self._next_id)
        self._next_id += 1
        self._utt = utt
        self._quiet_ms, self._quiet_hold = 0, False
        self.asr.open(utt.utt_id, pcm, start_sample, partials=partials)

    def audio(self, pcm: npt.NDArray[np.float32]) -> None:
        if self._utt is not None and self._utt.end_sample is None:
            self.asr.feed(self._utt.utt_id, pcm)

    def closed(self, speech_end_sample: int) -> None:
        if self._utt is not None:
            self._utt.end_sample = speech_end_sample

    def voice_frame(self, voiced: bool, duration_ms: int) -> None:
        """Hold display partials as soon as the user goes quiet (see the module docstring)."""
        utt = self._utt
        if utt is None or utt.end_sample is not None:
            return
        if voiced:
            self._quiet_ms = 0
            if self._quiet_hold:
                self._quiet_hold = False
                self.asr.hold_partials(utt.utt_id, False)
            return
        self._quiet_ms += duration_ms
        if 0 < self.quiet_hold_ms <= self._quiet_ms and not self._quiet_hold:
            self._quiet_hold = True
            self.asr.hold_partials(utt.utt_id, True)

    def paused(self, pause_start_sample: int, tail_ms: int, *, with_p: bool = False) -> None:
        """The speech went quiet at ``pause_start_sample`` (a pause may be starting):
        decode what its preview will (see :func:`decode_tail_ms`) and post it as an
        :class:`~assistant.loop.asr_worker.AsrOnsetPreview` (a speculation may start on
        it before the pause counts)."""
        if self._utt is not None and self._utt.end_sample is None:
            self.asr.prepare(self._utt.utt_id, self._end(pause_start_sample, tail_ms),
                             with_p=with_p, post=True)

    def short_pause(self, pause_start_sample: int, tail_ms: int) -> None:
        """A pause began at ``pause_start_sample``: a preview decodes up to it plus the
        tail (the tail fits in the pause, so that audio is there)."""
        self._pause_end_sample = self._end(pause_start_sample, tail_ms)
        self._quiet_hold = False  # the pause holds them now, until speech resumes
        if self._utt is not None:
            self.asr.hold_partials(self._utt.utt_id, True)

    def speech_resumed(self) -> None:
        if self._utt is not None:
            self.asr.hold_partials(self._utt.utt_id, False)

    # ------------------------------------------------------------------ turn actions

    def request_preview(self, *, with_p: bool = False) -> None:
        if self._utt is not None:
            self.asr.preview(self._utt.utt_id, self._pause_end_sample, with_p=with_p)

    def request_audio_score(self, pause: int) -> None:
        """Ask the audio end-of-turn model about the open utterance so far."""
        if self._utt is not None and self._utt.end_sample is None:
            self.asr.audio_score(self._utt.utt_id, pause)

    def request_interim(self) -> None:
        """Decode the open utterance's audio so far (an interim transcript, not held
        like display partials: speech over a paused reply)."""
        if self._utt is not None and self._utt.end_sample is None:
            self.asr.interim(self._utt.utt_id)

    def finalize(self, tail_ms: int, *, with_p: bool = False) -> None:
        """Decode the utterance to its end (plus the tail); the final comes back later."""
        if self._utt is None:
            return
        self._finals.append(self._utt.utt_id)
        self.asr.finalize(self._utt.utt_id, self._end(self._utt.end_sample or 0, tail_ms),
                          with_p=with_p)
        self._utt = None

    def _end(self, speech_end_sample: int, tail_ms: int) -> int:
        return speech_end_sample + tail_ms * self.rate // 1000

    def discard(self) -> None:
        if self._utt is not None:
            self.asr.discard(self._utt.utt_id)
            self._utt = None

    def final_arrived(self, utt_id: int) -> None:
        if utt_id in self._finals:
            self._finals.remove(utt_id)
