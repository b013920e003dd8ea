"""The engine's step gate: a reply's first audio is synthesised while the engine waits.

Deterministic where it can be: waits are released by events; the only timed checks are
that a held gate does not let the engine through early and that its cap lets it through.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
import time
import typing
from collections.abc import Iterator

import pytest

from assistant.dialogue.types import ReplyDelta, TurnStart
from assistant.llm.host import EngineHost
from assistant.llm.step_gate import StepGate
from assistant.loop.engine_client import DialogueClient
from assistant.loop.tts_worker import TtsWorker
from assistant.speech.voice import ClauseRule
from tests.assistant.test_engine_host import TIMEOUT, HeldBackend, Inbox
from tests.replay.fakes import ToneSynthesizer, scripted_dialogue, scripted_engine


def _waiter(gate: StepGate) -> tuple[threading.Thread, list[float]]:
    waited: list[float] = []
    thread = threading.Thread(target=lambda: waited.append(gate.wait()))
    thread.start()
    return thread, waited


def test_an_unheld_gate_does_not_wait_and_a_held_one_waits_for_its_release() -> None:
    gate = StepGate(max_hold_s=TIMEOUT)
    assert gate.wait() == 0.0 and not gate.held
    with gate.hold():
        with gate.hold():  # two holders: the engine waits for both
            assert gate.held
            thread, waited = _waiter(gate)
            thread.join(0.1)
            assert thread.is_alive()
        thread.join(0.1)
        assert thread.is_alive()  # one still holds
    thread.join(TIMEOUT)
    assert not thread.is_alive() and 0.1 <= waited[0] < TIMEOUT
    assert gate.waited_s == pytest.approx(waited[0]) and not gate.held


def test_a_gate_held_too_long_lets_the_engine_through_after_its_cap() -> None:
    gate = StepGate(max_hold_s=0.05)
    with gate.hold():
        start = time.monotonic()
        waited = gate.wait()
        assert waited >= 0.05 and time.monotonic() - start < TIMEOUT
    with pytest.raises(ValueError):
        StepGate(max_hold_s=0)


@dataclasses.dataclass
class _Gated:
    """An engine host with a step gate, and one session's dialogue client on it."""

    backend: HeldBackend
    gate: StepGate
    host: EngineHost
    box: Inbox
    client: DialogueClient


@contextlib.contextmanager
def _gated(max_hold_s: float) -> Iterator[_Gated]:
    engine, template = scripted_engine()
    backend = HeldBackend(engine)
    gate = StepGate(max_hold_s=max_hold_s)
    host = EngineHost(backend, gate=gate)
    box = Inbox()
    try:
        client = DialogueClient(host, scripted_dialogue(template, max_new_tokens=60), box)
        yield _Gated(backend, gate, host, box, client)
    finally:
        host.close()


def _until(predicate: typing.Callable[[], bool]) -> None:
    deadline = time.monotonic() + TIMEOUT
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.002)


def test_engine_steps_wait_at_a_held_gate_while_commands_still_run() -> None:
    with _gated(TIMEOUT) as g:
        with g.gate.hold():
            g.client.start_turn(1, "hello", None)
            g.box.wait_for(lambda i: isinstance(i, TurnStart))  # a command: not gated
            steps = g.backend.steps
            # The engine thread reaches the gate for its first step and stops there.
            _until(lambda: g.gate.waiting == 1)
            assert g.backend.steps == steps  # no step while the gate is held
        g.box.wait_for(lambda i: isinstance(i, ReplyDelta) and i.turn_id == 1 and i.done)
        assert g.backend.steps > steps and g.gate.waited_s > 0


class _GateWatcher(ToneSynthesizer):
    """Tones that note, per span, whether the gate was held while it was synthesised."""

    def __init__(self, gate: StepGate) -> None:
        super().__init__()
        self.gate = gate
        self.held: list[tuple[str, bool]] = []

    def synthesize_span(self, text: str, **kw: typing.Any) -> typing.Any:
        self.held.append((text.strip(), self.gate.held))
        return super().synthesize_span(text, **kw)


@pytest.mark.parametrize("enabled", [True, False])
def test_the_first_clause_and_a_presynthesis_hold_the_gate_later_clauses_do_not(
        enabled: bool) -> None:
    gate = StepGate(max_hold_s=TIMEOUT)
    synth = _GateWatcher(gate)
    w = TtsWorker(synth, [].append, clauses=ClauseRule(min_chars=6),
                  gate=gate if enabled else None)
    try:
        w.presynthesize(1, "A draft ahead.")
        w.idle().result(timeout=TIMEOUT)
        w.begin(7)
        w.feed(7, "Sure, here it is. And more text follows", done=False)
        w.feed(7, ".", done=True)
        w.begin(8)
        w.feed(8, "Yes", done=False)
        w.feed(8, "", done=True)  # the whole reply comes out when it is finished
        w.idle().result(timeout=TIMEOUT)
    finally:
        w.close()
    assert synth.held == [("A draft ahead.", enabled), ("Sure, here it is.", enabled),
                          ("And more text follows.", False), ("Yes", enabled)]
    assert not gate.held


def test_a_hold_that_follows_a_state_is_idempotent_and_shared_with_block_holds() -> None:
    gate = StepGate(max_hold_s=TIMEOUT)
    a, b = object(), object()
    gate.set_held(a, True)
    gate.set_held(a, True)  # the same state again: still one hold
    gate.set_held(b, True)
    gate.set_held(a, False)
    assert gate.held  # b holds
    with gate.hold():
        gate.set_held(b, False)
        gate.set_held(b, False)  # released twice: nothing more is released
        assert gate.held  # the block holds
        thread, waited = _waiter(gate)
        thread.join(0.1)
        assert thread.is_alive()
    thread.join(TIMEOUT)
    assert not thread.is_alive() and waited[0] < TIMEOUT and not gate.held



def test_a_command_that_comes_while_a_step_waits_at_the_gate_runs_at_once() -> None:
    # Only steps are gated: a session's turn start (or a barge-in's cut) must not wait
    # behind another session's first clause with the step.
    with _gated(TIMEOUT) as g:
        with g.gate.hold():
            g.client.start_turn(1, "hello", None)
            g.box.wait_for(lambda i: isinstance(i, TurnStart))
            _until(lambda: g.gate.waiting == 1)
            steps = g.backend.steps
            ran = g.host.call(lambda b: b.stats()).result(timeout=TIMEOUT / 2)
            assert ran is not None and g.gate.held
            _until(lambda: g.gate.waiting == 1)  # the step waits on after the command
            assert g.backend.steps == steps
        g.box.wait_for(lambda i: isinstance(i, ReplyDelta) and i.turn_id == 1 and i.done)


def test_commands_coming_all_along_do_not_hold_a_waiting_step_past_the_cap() -> None:
    with _gated(0.2) as g, g.gate.hold():
        g.client.start_turn(1, "hello", None)
        g.box.wait_for(lambda i: isinstance(i, TurnStart))
        steps = g.backend.steps
        deadline = time.monotonic() + TIMEOUT
        while g.backend.steps == steps:  # a command every 20 ms, each ending a wait
            g.host.call(lambda b: None).result(timeout=TIMEOUT)
            time.sleep(0.02)
            assert time.monotonic() < deadline, "the step never went through"
