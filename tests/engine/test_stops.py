"""Stop strings split across tokens, stop tokens, incremental detokenization."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from engine import FinishReason, SamplingParams
from engine.detokenize import IncrementalDetokenizer
from engine.reply_text import ReplyText, closing_cut
from engine.stops import StopMatcher
from tests.engine.fake_runner import ByteTokenizer, assert_cache_matches, make_engine

MERGES = ("e\nUs", "lo", "Us")
EOT = "<eot>"


def tokenizer() -> ByteTokenizer:
    return ByteTokenizer(merges=MERGES, specials=(EOT,))


def run_scripted(target: list[int], *, stop: tuple[str, ...] = (), max_new_tokens: int = 200,
                 prompt: tuple[int, ...] = (60, 61, 62, 63, 64)):  # type: ignore[no-untyped-def]
    """Generate with a fake model that emits `target` and then the end-of-turn token."""
    tok = tokenizer()
    eot = tok.special_ids[EOT]
    start = len(prompt)

    def next_token(context: tuple[int, ...]) -> int:
        i = len(context) - start
        return target[i] if 0 <= i < len(target) else eot

    engine, runner = make_engine(page_size=4, vocab_size=tok.vocab_size, eos_token_ids=(eot,),
                                 next_token=next_token, tokenizer=tok)
    seq = engine.sequence()
    params = SamplingParams(max_new_tokens=max_new_tokens, stop=stop,
                            end_of_turn=(eot, ord("\n")))
    events = list(seq.generate(params, prompt_ids=prompt))
    assert_cache_matches(engine, runner)
    return tok, seq, events


def byte_ids(text: str) -> list[int]:
    return list(text.encode())


def test_stop_matcher_finds_the_earliest_stop_and_holds_back_prefixes() -> None:
    matcher = StopMatcher(["bc", "ab", "\nUser:"])
    assert matcher.find("xabc") == 1
    assert matcher.find("xabc", 2) == 2
    assert matcher.find("xyz") is None
    assert matcher.holdback("say a") == 1
    assert matcher.holdback("line\nUse") == 4
    assert matcher.holdback("line\n") == 1
    assert matcher.holdback("done.") == 0


def test_detokenizer_releases_multibyte_characters_whole() -> None:
    tok = tokenizer()
    detok = IncrementalDetokenizer(tok, context=[65])
    deltas = [detok.push(t) for t in byte_ids("na\u00efve \u20ac!")]
    assert all("\ufffd" not in d for d in deltas)
    assert deltas[byte_ids("na").__len__()] == ""  # first byte of the two-byte ï
    assert "".join(deltas) == "na\u00efve \u20ac!"
    assert detok.text_of_first(3) == "na\ufffd"  # half a character
    assert detok.text_of_first(4) == "na\u00ef"


def test_a_stop_string_split_across_tokens_is_never_streamed() -> None:
    text = "Hello there\nUser: more words"
    tok, seq, events = run_scripted(byte_ids(text), stop=("\nUser:",))
    streamed = "".join(e.text_delta for e in events)
    assert streamed == "Hello there"
    newline_event = events[len("Hello there")]
    assert newline_event.text_delta == ""  # held back: it could start the stop string
    assert events[-1].finished and events[-1].finish_reason is FinishReason.STOP
    eot = tok.special_ids[EOT]
    # The cache holds the prompt, the kept text's tokens, and the end-of-turn ids.
    assert seq.tokens[5:] == tuple(byte_ids("Hello there")) + (eot, ord("\n"))
    assert len(seq) == 5 + len("Hello there") + 2


def test_a_stop_string_starting_inside_a_merged_token_keeps_its_head() -> None:
    tok = tokenizer()
    target = byte_ids("Hello ther") + tok.encode("e\nUs") + byte_ids("er: go on")
    assert tok.encode("e\nUs") == [256]  # one merged token straddles the stop's start
    _, seq, events = run_scripted(target, stop=("\nUser:",))
    assert "".join(e.text_delta for e in events) == "Hello there"
    assert events[-1].finish_reason is FinishReason.STOP
    eot = tok.special_ids[EOT]
    assert seq.tokens[5:] == tuple(byte_ids("Hello ther")) + (ord("e"), eot, ord("\n"))


def test_held_back_text_is_released_when_the_stop_does_not_follow() -> None:
    tok, seq, events = run_scripted(byte_ids("a\nUb"), stop=("\nUser:",))
    assert "".join(e.text_delta for e in events) == "a\nUb"
    assert events[-1].finish_reason is FinishReason.EOS
    assert events[-1].token_id == tok.special_ids[EOT]
    assert seq.tokens[5:] == tuple(byte_ids("a\nUb")) + (tok.special_ids[EOT], ord("\n"))


def test_length_limit_keeps_every_generated_token() -> None:
    tok, seq, events = run_scripted(byte_ids("abcdefgh"), max_new_tokens=5)
    assert "".join(e.text_delta for e in events) == "abcde"
    assert events[-1].finish_reason is FinishReason.LENGTH
    assert seq.tokens[5:] == tuple(byte_ids("abcde")) + (tok.special_ids[EOT], ord("\n"))


@settings(max_examples=60, deadline=None)
@given(text=st.text(alphabet="ab:\n\u00e9", max_size=30),
       stops=st.lists(st.text(alphabet="ab:\n", min_size=1, max_size=4), max_size=3))
def test_streamed_text_is_the_text_before_the_first_stop(text: str, stops: list[str]) -> None:
    tok, seq, events = run_scripted(byte_ids(text), stop=tuple(stops))
    # Generation stops as soon as the text so far contains a stop string (a longer stop
    # string that would have started earlier never gets the chance to complete).
    stop_at = None
    for end in range(1, len(text) + 1):
        hits = [i for i in (text[:end].find(s) for s in stops) if i >= 0]
        if hits:
            stop_at = min(hits)
            break
    kept = text if stop_at is None else text[:stop_at]
    streamed = ""
    for event in events:
        streamed += event.text_delta
        assert not any(s in streamed for s in stops)
    assert streamed == kept
    assert events[-1].finish_reason is (FinishReason.EOS if stop_at is None
                                        else FinishReason.STOP)
    assert seq.tokens[5:] == tuple(tok.encode(kept)) + (tok.special_ids[EOT], ord("\n"))


def feed(text_ids: list[int], room: int = 99, **params: object) -> tuple[str, list[object]]:
    """Run :class:`ReplyText` alone on ids until a step ends the reply."""
    tok = tokenizer()
    reply = ReplyText(SamplingParams(**params), tok, (tok.special_ids[EOT],), (60, 61))  # type: ignore[arg-type]
    streamed = ""
    for i, token_id in enumerate(text_ids):
        step = reply.add(token_id, room_for_next=i < room)
        streamed += step.delta
        if step.finish is not None:
            assert reply.end(step.delta) == streamed
            return streamed, [step.finish, step.kept]
    return streamed, [None, ()]


def test_reply_text_ends_on_stop_ids_stop_strings_length_and_room() -> None:
    tok = tokenizer()
    eot = tok.special_ids[EOT]
    # A stop id is not kept; the text before it is all released.
    assert feed(byte_ids("ab") + [eot]) == ("ab", [FinishReason.EOS, tuple(byte_ids("ab"))])
    # A stop string inside a merged token keeps the ids spelling the text before it.
    assert feed(byte_ids("ther") + tok.encode("e\nUs") + byte_ids("er:"), stop=("\nUser:",)) \
        == ("there", [FinishReason.STOP, tuple(byte_ids("ther")) + (ord("e"),)])
    # max_new_tokens keeps every id; no room for the next one ends the reply the same way.
    assert feed(byte_ids("abcdef"), max_new_tokens=3) \
        == ("abc", [FinishReason.LENGTH, tuple(byte_ids("abc"))])
    assert feed(byte_ids("abcdefghij"), room=6) \
        == ("abcdefg", [FinishReason.LENGTH, tuple(byte_ids("abcdefg"))])


def test_closing_cut_keeps_the_shared_reply_and_appends_the_rest_and_end_of_turn() -> None:
    assert closing_cut([1, 2, 3], [1, 2, 3], [9]) == (3, [9])
    assert closing_cut([1, 2, 3], [1, 2], [9]) == (2, [9])  # the stop id is cut off
    assert closing_cut([1, 2], [1, 7, 8], [9, 10]) == (1, [7, 8, 9, 10])  # re-encoded tail
    assert closing_cut([], [], [9]) == (0, [9])
