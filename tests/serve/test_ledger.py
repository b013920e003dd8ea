"""The response ledger and manual turns of the real backend (pure, no models)."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from assistant.serve.backend.contract import ResponseFinished, TokenUsage
from assistant.serve.backend.ledger import ResponseLedger
from assistant.serve.backend.manual_turns import ManualTurns


def test_a_requested_response_keeps_its_key_and_a_vad_reply_gets_a_new_one() -> None:
    ledger = ResponseLedger()
    key = ledger.request()
    assert ledger.busy and ledger.turn_of(key) is None
    assert ledger.start(1, TokenUsage(input_tokens=30, cached_tokens=20)) == key
    assert ledger.open_turn == 1 and ledger.requested is None
    ledger.set_reason(1, "client_cancelled")
    done = ledger.finish(1, text="Hello", output_tokens=4, interrupted=True)
    assert done == ResponseFinished(response_key=key, status="cancelled",
                                    reason="client_cancelled", text="Hello",
                                    usage=TokenUsage(input_tokens=30, cached_tokens=20,
                                                     output_tokens=4))
    assert not ledger.busy
    vad_key = ledger.start(2, TokenUsage())
    assert vad_key != key and ledger.key_of(2) == vad_key and ledger.turn_of(vad_key) == 2
    done = ledger.finish(2, text="All of it.", output_tokens=9, interrupted=False)
    assert done is not None and done.status == "completed" and done.reason is None
    assert ledger.text_of(2) == "All of it." and ledger.started == 2


def test_a_withdrawn_reply_is_cancelled_and_an_unknown_turn_reports_nothing() -> None:
    ledger = ResponseLedger()
    key = ledger.start(3, TokenUsage(input_tokens=5))
    assert ledger.finish(9, text="", output_tokens=0, interrupted=False) is None
    done = ledger.withdraw(3)
    assert done is not None and done.response_key == key
    assert (done.status, done.reason) == ("cancelled", "turn_detected")
    assert ledger.withdraw(3) is None and ledger.open_turn is None


def test_a_dropped_request_frees_the_ledger() -> None:
    ledger = ResponseLedger()
    key = ledger.request()
    assert not ledger.drop_request(key + 1)
    assert ledger.drop_request(key) and not ledger.busy


def test_manual_turns_join_text_and_transcripts_in_order() -> None:
    async def scenario() -> str:
        turns = ManualTurns(lambda pcm: f"heard {pcm.size}")
        assert not turns.pending
        turns.add_text("first,")
        turns.commit(np.zeros(3, np.float32))
        turns.add_text("then text")
        assert turns.pending
        text = await turns.take_text()
        assert not turns.pending
        return text

    assert asyncio.run(scenario()) == "first, heard 3 then text"


def test_a_failed_transcription_reaches_the_response_request() -> None:
    def broken(pcm: object) -> str:
        raise RuntimeError("decoder crashed")

    async def scenario() -> None:
        turns = ManualTurns(broken)  # type: ignore[arg-type]
        turns.commit(np.zeros(3, np.float32))
        await turns.take_text()

    with pytest.raises(RuntimeError, match="decoder crashed"):
        asyncio.run(scenario())
