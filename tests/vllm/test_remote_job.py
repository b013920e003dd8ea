"""The vLLM backend's job, without a server: fed the ids the local engine sampled, it
ends the reply, keeps the ids, streams the text and closes the turn exactly as the local
engine's job does (both are `engine.reply_job.ReplyJob`)."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from assistant.llm.vllm.job import RemoteJob
from assistant.llm.vllm.sequence import RemoteSequence
from engine.events import FinishReason, PrefillStats
from engine.params import Priority, SamplingParams
from tests.engine.fake_runner import ByteTokenizer, make_engine
from tests.replay.fakes import END, START

TOK = ByteTokenizer(merges=["assistant", "user"], specials=[START, END])
END_ID = TOK.special_ids[END]
PROMPT = TOK.encode("user: hello\nassistant: ")


class Owner:
    """The little of a backend a remote sequence asks for."""

    def __init__(self, max_positions: int) -> None:
        self.max_positions = max_positions
        self.vocab_size = TOK.vocab_size

    def expected_stats(self, seq: RemoteSequence, ids: Sequence[int]) -> PrefillStats:
        return PrefillStats(len(ids), 0, 0)

    def new_sequence(self, *, key: int, priority: Priority,
                     tokens: Sequence[int] = ()) -> RemoteSequence:
        return RemoteSequence(self, 2, key, priority=priority, tokens=tokens)

    def on_release(self, seq: RemoteSequence) -> None:
        pass


def local(reply: str, params: SamplingParams, max_positions: int = 1 << 20
          ) -> tuple[list[tuple[str, bool]], object, tuple[int, ...], tuple[int, ...]]:
    """The local engine's job on a model that spells ``reply`` then ends its turn: its
    events (text, finished), result, sampled ids and final sequence."""
    script = [*TOK.encode(reply), END_ID]

    def next_token(ctx: tuple[int, ...]) -> int | None:
        done = len(ctx) - len(PROMPT)
        return script[done] if 0 <= done < len(script) else END_ID

    engine, _ = make_engine(vocab_size=TOK.vocab_size, eos_token_ids=(END_ID,), tokenizer=TOK,
                            next_token=next_token, max_positions=max_positions)
    seq = engine.sequence()
    seq.extend(PROMPT)
    job = engine.enqueue(seq, params)
    events = []
    while not job.done:
        events += [(e.text_delta, e.finished) for e in engine.step() if e.job_id == job.job_id]
    return events, job.result, job.generated, seq.tokens


def remote(ids: Sequence[int], params: SamplingParams, max_positions: int = 1 << 20
           ) -> tuple[list[tuple[str, bool]], RemoteJob, RemoteSequence]:
    seq = RemoteSequence(Owner(max_positions), 1, 1, priority=Priority.LIVE)
    seq.extend(PROMPT)
    job = RemoteJob(1, seq, params, priority=Priority.LIVE, tokenizer=TOK,
                    eos_token_ids=(END_ID,))
    seq.job = job
    for token_id in ids:  # one id a chunk, as a slow stream sends them
        job.on_tokens([token_id])
    return [(e.text_delta, e.finished) for e in job.take_events()], job, seq


CLOSE = TOK.encode(END + "\n")


@pytest.mark.parametrize(("reply", "params"), [
    ("Paris is the capital.", SamplingParams(max_new_tokens=64, end_of_turn=tuple(CLOSE))),
    ("One. Two. Three.", SamplingParams(max_new_tokens=64, stop=("Two",),
                                        end_of_turn=tuple(CLOSE))),
    ("A long reply that runs on and on.", SamplingParams(max_new_tokens=7,
                                                         end_of_turn=tuple(CLOSE))),
])
def test_the_remote_job_ends_keeps_and_closes_as_the_local_one(
        reply: str, params: SamplingParams) -> None:
    want_events, want, sampled, want_seq = local(reply, params)
    events, job, seq = remote(sampled, params)
    assert job.done and job.result is not None
    assert events == want_events
    assert (job.result.token_ids, job.result.text, job.result.finish_reason) == (
        want.token_ids, want.text, want.finish_reason)  # type: ignore[attr-defined]
    assert seq.tokens == want_seq  # the turn closed the same way
    assert seq.tokens[-len(CLOSE):] == tuple(CLOSE)


def test_the_context_s_end_ends_the_reply_with_room_to_close_the_turn() -> None:
    params = SamplingParams(max_new_tokens=64, end_of_turn=tuple(CLOSE))
    limit = len(PROMPT) + 12
    want_events, want, sampled, want_seq = local("Too long to fit here, sorry.", params, limit)
    events, job, seq = remote(sampled, params, limit)
    assert want.finish_reason is FinishReason.LENGTH  # type: ignore[attr-defined]
    assert job.result is not None and job.result.finish_reason is FinishReason.LENGTH
    assert events == want_events and seq.tokens == want_seq and len(seq) <= limit


def test_a_cancel_keeps_the_ids_the_sequence_holds_and_touches_nothing() -> None:
    params = SamplingParams(max_new_tokens=64, end_of_turn=tuple(CLOSE))
    seq = RemoteSequence(Owner(1 << 20), 1, 1, priority=Priority.LIVE)
    seq.extend(PROMPT)
    job = RemoteJob(1, seq, params, priority=Priority.LIVE, tokenizer=TOK,
                    eos_token_ids=(END_ID,))
    job.on_tokens(TOK.encode("Hello"))
    job.finish_cancelled()
    assert job.result is not None and job.result.finish_reason is FinishReason.CANCELLED
    # The last id was pending (never joined the sequence), as on the local engine.
    assert job.result.token_ids == tuple(TOK.encode("Hell"))
    assert seq.tokens == (*PROMPT, *TOK.encode("Hell"))
    assert job.take_events()[-1].token_id == -1
    job.on_tokens(TOK.encode(" more"))  # after the end: ignored
    assert seq.tokens == (*PROMPT, *TOK.encode("Hell"))


def test_the_server_ending_on_its_own_is_a_length_end() -> None:
    params = SamplingParams(max_new_tokens=64, end_of_turn=tuple(CLOSE))
    _, job, seq = remote(TOK.encode("Half a"), params)
    job.on_server_finished()
    assert job.result is not None and job.result.finish_reason is FinishReason.LENGTH
    assert job.result.text == "Half a"
    assert seq.tokens == (*PROMPT, *TOK.encode("Half a"), *CLOSE)
