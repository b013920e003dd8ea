"""TTS: clause chunking (pure), streaming synthesis offsets, Piper synthesis with word tables."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from audio.clauses import Clause, ClauseChunker, split_sentences
from audio.errors import ModelLoadError
from audio.tts import StreamingTTS, Synthesizer
from audio.word_timing import TTSChunk, estimate_words, heard_position, split_words

# -- clause chunker (pure) ---------------------------------------------------------------


def _feed_all(chunker: ClauseChunker, deltas: list[str]) -> list[str]:
    out = []
    for d in deltas:
        out += [c.text for c in chunker.feed(d)]
    return out + [c.text for c in chunker.flush()]


def test_sentences_and_long_clauses_split_short_clauses_do_not() -> None:
    text = "Yes, sure. The weather today is sunny, with a light breeze; enjoy it! Bye"
    got = _feed_all(ClauseChunker(min_clause_chars=12), list(text))
    assert [g.strip() for g in got] == [
        "Yes, sure.",  # "Yes," is shorter than 12 characters: no split
        "The weather today is sunny,",
        "with a light breeze;",
        "enjoy it!",
        "Bye",
    ]
    assert "".join(got) == text


def test_no_split_inside_numbers_abbreviations_or_before_lookahead() -> None:
    c = ClauseChunker(min_clause_chars=5)
    assert c.feed("It costs 3.") == []  # "3." could be "3.5": wait for the next character
    assert c.feed("5 dollars at Dr. Smith's.") == []
    clauses = c.feed(" Next")
    assert [x.text for x in clauses] == ["It costs 3.5 dollars at Dr. Smith's. "]
    assert [x.text for x in c.flush()] == ["Next"]
    assert c.flush() == []  # idempotent
    with pytest.raises(RuntimeError):
        c.feed("more")


def test_punctuation_only_text_is_not_a_clause() -> None:
    c = ClauseChunker()
    assert c.feed("... ") == []
    assert [x.text for x in c.feed("Okay. ")] == ["... Okay. "]


def test_long_text_without_punctuation_is_cut_at_a_space() -> None:
    words = " ".join(["word"] * 100)
    got = _feed_all(ClauseChunker(min_clause_chars=10, max_clause_chars=60), [words])
    assert len(got) > 1 and all(len(g) <= 66 for g in got)
    assert all(not g.rstrip().endswith("wor") for g in got)  # never inside a word
    assert "".join(got) == words


def test_newline_ends_a_clause() -> None:
    assert [c.text for c in split_sentences("first line\nsecond line")] == ["first line\n", "second line"]


@settings(max_examples=300, deadline=None)
@given(
    text=st.text(alphabet="ab  .,;!?\n3'\"", max_size=120),
    cuts=st.lists(st.integers(min_value=0, max_value=120), max_size=12),
    sizes=st.tuples(st.integers(min_value=0, max_value=10), st.integers(min_value=1, max_value=40)),
)
def test_delta_boundaries_do_not_change_the_clauses(text: str, cuts: list[int], sizes: tuple[int, int]) -> None:
    """However the LLM splits its output, the same clauses come out, covering the text.
    (A trailing flush may add a clause with no words, e.g. a last space.)"""
    points = sorted({min(c, len(text)) for c in cuts} | {0, len(text)})
    deltas = [text[a:b] for a, b in zip(points, points[1:], strict=False)]
    c1, c2 = ClauseChunker(*sizes), ClauseChunker(*sizes)
    whole = c1.feed(text) + c1.flush()
    streamed = [x for d in deltas for x in c2.feed(d)] + c2.flush()
    assert "".join(x.text for x in streamed) == text
    for a, b in zip(streamed, streamed[1:], strict=False):
        assert a.char_end == b.char_start
    def speakable(clauses: list[Clause]) -> list[str]:
        return [x.text.strip() for x in clauses if any(ch.isalnum() for ch in x.text)]

    assert speakable(streamed) == speakable(whole)


# -- streaming TTS with a fake synthesizer (pure) ---------------------------------------


class FakeSynth:
    """100 samples per character; words spread evenly."""

    sample_rate = 1000

    def __init__(self) -> None:
        self.calls: list[str] = []

    def synthesize_span(self, text: str, *, turn_id: int = 0, char_start: int = 0, start_sample: int = 0,
                        word_index: int = 0, token_start: int | None = None,
                        token_end: int | None = None) -> TTSChunk | None:
        self.calls.append(text)
        words = split_words(text)
        if not words:
            return None
        n = 100 * len(text)
        return TTSChunk(turn_id, np.zeros(n, np.int16), self.sample_rate, text, char_start,
                        char_start + len(text), estimate_words(words, n, char_start), start_sample,
                        token_start, token_end, word_index)


def test_streaming_tts_offsets_are_relative_to_the_whole_reply() -> None:
    synth = FakeSynth()
    tts = StreamingTTS(synth, turn_id=7, min_clause_chars=5)
    reply = "Hello there. How are you today, my friend? Fine."
    tokens = ["Hello", " there", ".", " How", " are", " you", " today", ",", " my", " friend", "?", " Fine", "."]
    assert "".join(tokens) == reply
    out = []
    for i, tok in enumerate(tokens):
        out += tts.feed(tok, token_count=i + 1)
    out += tts.finish()
    assert [c.text.strip() for c in out] == ["Hello there.", "How are you today,", "my friend?", "Fine."]
    assert all(c.turn_id == 7 for c in out)
    assert [c.start_sample for c in out] == list(np.cumsum([0] + [c.num_samples for c in out[:-1]]))
    assert [c.word_index for c in out] == [0, 2, 6, 8]
    for c in out:
        assert reply[c.char_start : c.char_end] == c.text
        for w in c.words:
            assert reply[w.char_start : w.char_end] == w.word
    # "Hello there." came from tokens 0..2; "my friend?" from tokens 8..10.
    assert (out[0].token_start, out[0].token_end) == (0, 3)
    assert (out[2].token_start, out[2].token_end) == (8, 11)
    pos = heard_position(out, out[1].end_sample)
    assert pos.text == "Hello there. How are you today, "
    assert pos.token_end == out[1].token_end
    assert tts.text == reply and tts.chunks == tuple(out)


def test_streaming_tts_cancel_is_idempotent_and_stops_output() -> None:
    synth = FakeSynth()
    tts = StreamingTTS(synth, min_clause_chars=5)
    assert len(tts.feed("One sentence here. ")) == 1
    tts.cancel()
    tts.cancel()
    assert tts.cancelled
    assert tts.feed("Another sentence. ") == []
    assert tts.finish() == []
    assert synth.calls == ["One sentence here. "]


# -- real Piper voice --------------------------------------------------------------------


@pytest.mark.slow
def test_synthesize_streams_one_chunk_per_sentence_with_word_tables(synthesizer: Synthesizer) -> None:
    text = "Good morning! The train to Boston leaves at noon, so hurry. Thanks."
    chunks = list(synthesizer.synthesize(text, turn_id=3, token_range=(0, 20)))
    assert [c.text.strip() for c in chunks] == ["Good morning!", "The train to Boston leaves at noon, so hurry.", "Thanks."]
    assert synthesizer.sample_rate == 22050
    pos = 0
    words_seen = 0
    for c in chunks:
        assert c.turn_id == 3 and c.sample_rate == 22050 and c.pcm.dtype == np.int16
        assert c.start_sample == pos and c.word_index == words_seen
        assert (c.token_start, c.token_end) == (0, 20)
        assert np.abs(c.pcm).max() > 10000  # real, loud audio
        assert text[c.char_start : c.char_end] == c.text
        assert [w.word for w in c.words] == [w.word for w in split_words(c.text)]
        prev_end = 0
        for w in c.words:
            assert text[w.char_start : w.char_end] == w.word
            assert prev_end <= w.start_sample < w.end_sample <= c.num_samples
            prev_end = w.end_sample
        pos = c.end_sample
        words_seen += len(c.words)
    # Longer words take longer to say than short ones, on average.
    long = [w.end_sample - w.start_sample for c in chunks for w in c.words if len(w.word) >= 6]
    short = [w.end_sample - w.start_sample for c in chunks for w in c.words if len(w.word) <= 2]
    assert np.mean(long) > 1.5 * np.mean(short)


def test_the_voice_session_has_word_alignments_and_idle_threads_sleep(
        synthesizer: Synthesizer) -> None:
    session = synthesizer._voice.session
    # Word timings come from the alignment output patched in at load.
    assert len(session.get_outputs()) >= 2
    # Its worker threads do not spin for work: two cores are shared with the LLM.
    options = session.get_session_options()
    assert options.get_session_config_entry("session.intra_op.allow_spinning") == "0"


@pytest.mark.slow
def test_cancel_stops_between_sentences(synthesizer: Synthesizer) -> None:
    gen = synthesizer.synthesize("First sentence. Second sentence. Third sentence.")
    first = next(gen)
    assert first.text.strip() == "First sentence."
    synthesizer.cancel()
    synthesizer.cancel()
    assert list(gen) == []
    # A new call after cancel works normally.
    assert len(list(synthesizer.synthesize("Fresh start. Again."))) == 2


@pytest.mark.slow
def test_expansions_get_one_word_entry(synthesizer: Synthesizer) -> None:
    chunk = synthesizer.synthesize_span("Dr. Smith paid $40 on Friday.")
    assert chunk is not None
    words = [w.word for w in chunk.words]
    assert words == ["Dr", "Smith", "paid", "$40", "on", "Friday"]
    spans = {w.word: w.end_sample - w.start_sample for w in chunk.words}
    assert spans["$40"] > spans["paid"]  # "forty dollars" takes longer than "paid"
    assert synthesizer.synthesize_span(" ... ") is None


def test_missing_voice_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ModelLoadError, match=r"nosuch\.onnx: voice model not found"):
        Synthesizer(tmp_path / "nosuch.onnx")
    onnx = tmp_path / "v.onnx"
    onnx.write_bytes(b"not a model")
    with pytest.raises(ModelLoadError, match="voice config not found"):
        Synthesizer(onnx)
    (tmp_path / "v.onnx.json").write_text("{}")
    with pytest.raises(ModelLoadError, match="cannot load Piper voice"):
        Synthesizer(onnx)
