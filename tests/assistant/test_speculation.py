"""Dialogue turns, barge-in truncation and speculation on the real engine over a fake model.

The fake runner (tests/engine/fake_runner.py) computes deterministic logits from the ids
read back through the page tables, so a wrong cache state changes the output; here a
script forces the reply to depend on the user's words: ``You said <words>. Fine, thanks!``.
"""

from __future__ import annotations

import pytest

from assistant.dialogue.dialogue import Dialogue
from assistant.dialogue.end_score import open_user_ids
from assistant.dialogue.speculation import common_prefix_len, resolve
from assistant.dialogue.types import DialogueOptions, ReplyDelta, SpeculationDrafted
from assistant.llm.local import LocalBackend
from assistant.speech.voice import ClauseRule
from engine.chat_template import ChatTemplate
from tests.engine.fake_runner import ByteTokenizer, FakeRunner, assert_cache_matches, make_engine
from tests.replay.fakes import END, START, chatml, scripted_next_token


def scripted_reply(user: str) -> str:
    return f"You said {user.strip().rstrip('?.!')}. Fine, thanks for asking!"


class Harness:
    def __init__(self, *, marker: bool = False, spec_tokens: int = 24,
                 scoring: bool = False) -> None:
        self.tok = ByteTokenizer(merges=["assistant", "user"], specials=[START, END])
        end_id = self.tok.special_ids[END]
        next_token = scripted_next_token(self.tok, scripted_reply)

        self.engine, self.runner = make_engine(
            page_size=4, num_pages=512, vocab_size=self.tok.vocab_size,
            eos_token_ids=(end_id,), next_token=next_token, tokenizer=self.tok)
        self.template = ChatTemplate(self.tok, render=chatml)
        self.dialogue = Dialogue(LocalBackend(self.engine), self.template, DialogueOptions(
            system_prompt="Be brief.", max_new_tokens=200, speculation_max_tokens=spec_tokens,
            clauses=ClauseRule(min_chars=6), interrupted_marker=marker, score_end_of_turn=scoring))

    def step(self) -> list[ReplyDelta | SpeculationDrafted]:
        """One engine step, then the dialogue collects (as on the engine thread)."""
        if self.engine.has_work():
            self.engine.step()
        return self.dialogue.collect()

    def run(self, max_steps: int = 1000) -> list[ReplyDelta | SpeculationDrafted]:
        out: list[ReplyDelta | SpeculationDrafted] = []
        for _ in range(max_steps):
            if self.engine.has_work():
                self.engine.step()  # what the engine thread does, then each dialogue collects
            out += self.dialogue.collect()
            assert_cache_matches(self.engine, self.runner)
            if not self.dialogue.has_work():
                return out
        raise AssertionError("engine never went idle")

    def reply_of(self, out: list[ReplyDelta | SpeculationDrafted], turn_id: int) -> str:
        return "".join(o.text for o in out if isinstance(o, ReplyDelta) and o.turn_id == turn_id)

    def history_ok(self) -> None:
        d = self.dialogue
        assert d.in_sync()
        assert len(d.sequence) == d.conversation.num_tokens
        marker = " [interrupted by the user]" if d.conversation.interrupted_marker else ""
        rendered = [{"role": t.role, "content": t.text + (marker if t.interrupted else "")}
                    for t in d.conversation.turns]
        assert self.tok.decode(list(d.sequence.tokens)) == chatml(rendered, False)


def prefill_tokens(runner: FakeRunner) -> int:
    return runner.prefill_tokens


def test_turn_computes_only_new_tokens_and_keeps_the_whole_reply() -> None:
    h = Harness()
    d = h.dialogue
    start = d.start_turn(1, "hello there", None)
    assert start.speculation == "none"
    assert start.prompt_tokens_computed == start.prompt_tokens
    out = h.run()
    assert h.reply_of(out, 1) == scripted_reply("hello there")
    assert [o.done for o in out if isinstance(o, ReplyDelta)][-1]
    closed = d.finish_turn(1, spoken_ms=1234)
    assert closed.turn.text == scripted_reply("hello there") and not closed.turn.interrupted
    assert closed.sequence_tokens == d.conversation.num_tokens
    h.history_ok()
    # Turn 2: every earlier token is reused, only the new user message + header computed.
    start2 = d.start_turn(2, "and you", None)
    assert start2.prompt_tokens_computed == start2.prompt_tokens
    assert start2.prompt_tokens_reused == len(d.sequence) - start2.prompt_tokens
    h.run()
    d.finish_turn(2, spoken_ms=10)
    h.history_ok()


@pytest.mark.parametrize("marker", [False, True])
def test_barge_in_keeps_heard_words_in_history_and_cache(marker: bool) -> None:
    h = Harness(marker=marker)
    d = h.dialogue
    d.start_turn(1, "tell me", None)
    out = h.run()
    full = h.reply_of(out, 1)
    heard = full.index(" Fine")  # heard through "me." -> word end excludes the period
    heard_word_end = full.index("me.") + 2
    assert heard_word_end < heard
    closed = d.cut_turn(1, heard_chars=heard_word_end, spoken_ms=800)
    turn = closed.turn
    assert turn.interrupted and turn.spoken_ms == 800
    assert turn.text == full[:heard_word_end]
    assert closed.kept_tokens == len(h.tok.encode(full[:heard_word_end]))
    assert closed.generated_tokens > closed.kept_tokens
    marker_text = " [interrupted by the user]" if marker else ""
    assert h.tok.decode(list(turn.token_ids)).endswith(full[:heard_word_end] + marker_text + END + "\n")
    h.history_ok()
    assert_cache_matches(h.engine, h.runner)
    # The next turn computes only its own ids.
    before = prefill_tokens(h.runner)
    start = d.start_turn(2, "go on", None)
    assert start.prompt_tokens_computed == start.prompt_tokens
    assert prefill_tokens(h.runner) - before == start.prompt_tokens
    h.run()
    d.finish_turn(2, spoken_ms=0)
    h.history_ok()


def test_barge_in_while_still_generating_cuts_within_written_tokens() -> None:
    h = Harness()
    d = h.dialogue
    d.start_turn(1, "tell me", None)
    text = ""
    for _ in range(12):
        for o in h.step():
            if isinstance(o, ReplyDelta):
                text += o.text
    assert d.has_work() and len(text) < len(scripted_reply("tell me"))
    closed = d.cut_turn(1, heard_chars=len(text), spoken_ms=300)
    assert not d.has_work()
    assert closed.turn.text == text[: len(closed.turn.text)]
    assert closed.kept_tokens <= closed.generated_tokens
    h.history_ok()


def test_withdrawn_turn_leaves_no_trace() -> None:
    h = Harness()
    d = h.dialogue
    before = d.sequence.tokens
    d.start_turn(1, "wait", None)
    h.step()
    d.withdraw_turn(1)
    assert d.sequence.tokens == before
    assert [t.role for t in d.conversation.turns] == ["system"]
    h.history_ok()


def test_speculation_hit_adopts_the_fork_without_computing_the_prompt() -> None:
    h = Harness()
    d = h.dialogue
    d.speculate(7, "what time is it")
    out = h.run()
    drafted = [o for o in out if isinstance(o, SpeculationDrafted)]
    assert drafted and drafted[0].spec_id == 7
    assert scripted_reply("what time is it").startswith(drafted[0].text.rstrip())
    before = prefill_tokens(h.runner)
    start = d.start_turn(1, "what time is it", 7)
    assert start.speculation == "hit" and start.spec_id == 7
    assert start.prompt_tokens_computed == 0
    assert start.drafted_tokens > 0
    assert start.prompt_tokens_reused == len(d.sequence) - start.drafted_tokens
    out = h.run()
    # Nothing prefilled: the reply just went on (the end-of-turn ids come at the close).
    assert prefill_tokens(h.runner) - before == 0
    deltas = [o for o in out if isinstance(o, ReplyDelta)]
    assert h.reply_of(out, 1) == scripted_reply("what time is it")
    assert deltas[-1].done
    d.finish_turn(1, spoken_ms=100)
    assert prefill_tokens(h.runner) - before == len(h.template.end_of_turn_ids)
    h.history_ok()


def test_speculation_miss_prefills_only_what_differs() -> None:
    h = Harness()
    d = h.dialogue
    d.speculate(1, "what time")
    h.run()
    start = d.start_turn(1, "what time is it in Paris", 1)
    assert start.speculation == "miss"
    assert 0 < start.common_prefix_tokens < start.prompt_tokens
    assert start.prompt_tokens_computed == start.prompt_tokens - start.common_prefix_tokens
    out = h.run()
    # The answer addresses the full utterance, not the speculated one.
    assert h.reply_of(out, 1) == scripted_reply("what time is it in Paris")
    d.finish_turn(1, spoken_ms=100)
    h.history_ok()


def test_a_newer_speculation_replaces_and_cancelled_ones_release_pages() -> None:
    h = Harness(spec_tokens=4)
    d = h.dialogue
    d.speculate(1, "what")
    d.speculate(2, "what time")
    h.run()
    d.cancel_speculation(1)
    d.cancel_speculation(1)  # idempotent
    assert len(h.engine.sequences()) == 2  # live + speculation 2
    d.cancel_speculation(2)
    assert len(h.engine.sequences()) == 1
    h.history_ok()


def test_hit_while_the_draft_is_still_running() -> None:
    h = Harness()
    d = h.dialogue
    d.speculate(3, "hello")
    h.step()  # prompt prefilled, first token sampled; the draft is unfinished
    start = d.start_turn(1, "hello", 3)
    assert start.speculation == "hit" and start.prompt_tokens_computed == 0
    out = h.run()
    assert h.reply_of(out, 1) == scripted_reply("hello")
    d.finish_turn(1, spoken_ms=1)
    h.history_ok()


def test_a_hit_keeps_only_the_drafted_ids_when_the_clause_ended_mid_batch() -> None:
    """A backend may hand over several ids in one step (a vLLM stream does). When the
    draft's first clause ends on an early one, the draft stops and its reply drops the
    rest, though its fork already holds them: the adopted turn must not keep them."""
    h = Harness(spec_tokens=200)
    d = h.dialogue
    d.speculate(5, "hello")
    for _ in range(30):  # ids sampled past the first clause before the dialogue collects
        h.engine.step()
    drafted = [o for o in d.collect() if isinstance(o, SpeculationDrafted)]
    assert [o.text for o in drafted] == ["You said hello. "]
    start = d.start_turn(1, "hello", 5)
    assert start.speculation == "hit"
    assert len(d.sequence) == start.prompt_tokens_reused + start.drafted_tokens
    out = h.run()
    assert h.reply_of(out, 1) == scripted_reply("hello")
    d.cut_turn(1, heard_chars=len("You said hello. Fine,"), spoken_ms=900)
    h.history_ok()


def test_resolve_and_common_prefix() -> None:
    assert common_prefix_len([1, 2, 3], [1, 2, 4, 5]) == 2
    assert resolve([1, 2], [1, 2]).hit
    r = resolve([1, 2], [1, 2, 3])
    assert not r.hit and r.common_prefix_tokens == 2


def test_the_end_of_turn_score_costs_no_prefill_and_changes_nothing_else() -> None:
    from assistant.dialogue.end_score import open_user_ids, sentence_end_ids
    from assistant.dialogue.types import EndOfTurnScore

    plain, scored = Harness(), Harness(scoring=True)
    assert plain.dialogue.speculate(3, "what time is it?") is None
    score = scored.dialogue.speculate(3, "what time is it?")
    assert isinstance(score, EndOfTurnScore) and score.spec_id == 3
    assert 0.0 <= score.p_end <= 1.0
    outs = [h.run() for h in (plain, scored)]
    assert [o for o in outs[0] if isinstance(o, SpeculationDrafted)] == \
        [o for o in outs[1] if isinstance(o, SpeculationDrafted)]
    assert prefill_tokens(plain.runner) == prefill_tokens(scored.runner)  # no extra prefill
    # The same probability, read on a sequence of its own.
    d = scored.dialogue
    ids = open_user_ids(d.conversation, "what time is it?")
    assert ids and d.conversation.renderer.encode("what time is it") == list(
        ids[-len("what time is it"):])
    with scored.engine.sequence() as seq:
        seq.extend(list(d.conversation.token_ids) + list(ids))
        direct = d.backend.next_token_probability(seq, sentence_end_ids(
            d.conversation.renderer))
    assert score.p_end == pytest.approx(direct, rel=1e-5)
    for h in (plain, scored):
        start = h.dialogue.start_turn(1, "what time is it?", 3)
        assert start.speculation == "hit" and start.prompt_tokens_computed == 0
        assert h.reply_of(h.run(), 1)
        h.dialogue.finish_turn(1, 100)
        h.history_ok()
    assert plain.dialogue.sequence.tokens == scored.dialogue.sequence.tokens


def test_words_warmed_while_the_user_speaks_are_not_computed_again() -> None:
    # What the user said so far is computed into the cache (a partial transcript); the
    # speculation at the pause computes only the words after it, and the end-of-turn
    # score and the draft are exactly what they would have been.
    cold, warm = Harness(scoring=True), Harness(scoring=True)
    warmed = warm.dialogue.warm("what time")
    assert warmed is not None and warmed.text == "what time"
    computed = warmed.tokens_computed
    assert computed == warmed.tokens == len(open_user_ids(warm.dialogue.conversation,
                                                          "what time"))
    again = warm.dialogue.warm("what time")
    assert again is not None and again.tokens_computed == 0  # cached already
    assert len(warm.engine.sequences()) == 1  # its fork was released
    before = [prefill_tokens(h.runner) for h in (cold, warm)]
    scores = [h.dialogue.speculate(3, "what time is it?") for h in (cold, warm)]
    outs = [h.run() for h in (cold, warm)]
    spent = [prefill_tokens(h.runner) - b for h, b in zip((cold, warm), before, strict=True)]
    assert computed > 0 and spent[1] == spent[0] - computed
    assert scores[0] is not None and scores[1] is not None
    assert scores[1].p_end == pytest.approx(scores[0].p_end, rel=1e-6)
    assert [o for o in outs[0] if isinstance(o, SpeculationDrafted)] == \
        [o for o in outs[1] if isinstance(o, SpeculationDrafted)]
    for h in (cold, warm):
        start = h.dialogue.start_turn(1, "what time is it?", 3)
        assert start.speculation == "hit" and start.prompt_tokens_computed == 0
        assert h.reply_of(h.run(), 1) == scripted_reply("what time is it?")
        h.dialogue.finish_turn(1, 100)
        h.history_ok()
    assert cold.dialogue.sequence.tokens == warm.dialogue.sequence.tokens


def test_nothing_is_warmed_while_a_reply_is_open() -> None:
    h = Harness()
    h.dialogue.start_turn(1, "hello", None)
    before = prefill_tokens(h.runner)
    assert h.dialogue.warm("what about") is None
    assert prefill_tokens(h.runner) == before
