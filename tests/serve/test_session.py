"""Protocol session logic without sockets: event order, ids, barge-in, truncation."""

from __future__ import annotations

import base64

import numpy as np
import pytest

from assistant.serve.protocol import client_events as C
from assistant.serve.protocol import server_events as S
from tests.serve.fake_backend import FakeBackend, silence, tone
from tests.serve.harness import Harness, harness
from tests.serve.support import DEFAULTS, run, utterance


def test_a_spoken_turn_produces_the_realtime_event_sequence() -> None:
    async def main() -> None:
        async with harness() as h:
            await h.audio(utterance())
            await h.wait_for("response.done")
            types = h.types()
            assert types[0] == "session.created"
            expected = [
                "input_audio_buffer.speech_started",
                "input_audio_buffer.speech_stopped",
                "input_audio_buffer.committed",
                "conversation.item.added",
                "conversation.item.done",
                "conversation.item.input_audio_transcription.delta",
                "conversation.item.input_audio_transcription.completed",
                "response.created",
                "response.output_item.added",
                "conversation.item.added",
                "response.content_part.added",
            ]
            assert types[1 : 1 + len(expected)] == expected
            tail = [
                "response.output_audio.done",
                "response.output_audio_transcript.done",
                "response.content_part.done",
                "response.output_item.done",
                "conversation.item.done",
                "response.done",
            ]
            assert types[-len(tail) :] == tail
            # ids tie together
            started = next(e for e in h.sent if isinstance(e, S.SpeechStarted))
            committed = next(e for e in h.sent if isinstance(e, S.InputAudioBufferCommitted))
            completed = next(e for e in h.sent if isinstance(e, S.TranscriptionCompleted))
            assert started.item_id == committed.item_id == completed.item_id
            assert completed.transcript.startswith("speech of")
            # onset at 200 ms of audio, minus the 300 ms prefix padding, floored at 0
            assert started.audio_start_ms == 0
            done = h.sent[-1]
            assert done.response.status == "completed"
            (item,) = done.response.output
            deltas = [e for e in h.sent if isinstance(e, S.OutputAudioTranscriptDelta)]
            assert "".join(d.delta for d in deltas) == item.content[0].transcript
            assert item.content[0].transcript == "one two three four five six"
            audio = [e for e in h.sent if isinstance(e, S.OutputAudioDelta)]
            samples = sum(len(base64.b64decode(a.delta)) // 2 for a in audio)
            assert samples == 6 * 200 * 24
            assert {a.item_id for a in audio} == {item.id}
            assert done.response.usage.input_token_details.cached_tokens == 4

    run(main())


def test_barge_in_cancels_the_response_with_turn_detected() -> None:
    async def main() -> None:
        async with harness(word_delay_s=0.05) as h:
            await h.audio(utterance())
            await h.wait_for("response.output_audio.delta")
            await h.audio(np.concatenate([tone(300), silence(100)]))
            done = (await h.wait_for("response.done"))[0]
            assert done.response.status == "cancelled"
            assert done.response.status_details.reason == "turn_detected"
            starts = await h.wait_for("input_audio_buffer.speech_started", count=2)
            assert starts[1].item_id != starts[0].item_id
            assert h.types().index("response.done") > h.types().index(
                "input_audio_buffer.speech_started", 2
            )

    run(main())


def test_truncate_keeps_only_the_heard_words_in_the_context() -> None:
    async def main() -> None:
        async with harness() as h:
            await h.audio(utterance())
            done = (await h.wait_for("response.done"))[0]
            item_id = done.response.output[0].id
            assert "one two three four five six" in (await h.backend.context_text())
            # 200 ms per word: 650 ms heard -> three words
            assert await h.client(C.ConversationItemTruncate(item_id=item_id, audio_end_ms=650)) is None
            truncated = (await h.wait_for("conversation.item.truncated"))[0]
            assert truncated.audio_end_ms == 650 and truncated.item_id == item_id
            assert (await h.backend.context_text()).endswith("assistant: one two three")
            await h.client(C.ConversationItemRetrieve(item_id=item_id))
            got = (await h.wait_for("conversation.item.retrieved"))[0]
            assert got.item.content[0].transcript == "one two three"
            assert got.item.status == "incomplete"

    run(main())


def test_truncate_refusals() -> None:
    async def main() -> None:
        async with harness() as h:
            await h.audio(utterance())
            done = (await h.wait_for("response.done"))[0]
            bot = done.response.output[0].id
            user = next(e for e in h.sent if isinstance(e, S.InputAudioBufferCommitted)).item_id
            past = await h.client(C.ConversationItemTruncate(item_id=bot, audio_end_ms=5000))
            assert past is not None and past.param == "audio_end_ms"
            wrong = await h.client(C.ConversationItemTruncate(item_id=user, audio_end_ms=10))
            assert wrong is not None and wrong.code == "invalid_item"
            missing = await h.client(C.ConversationItemTruncate(item_id="nope", audio_end_ms=1))
            assert missing is not None and missing.code == "item_not_found"
            assert h.backend.truncations == []
            errors = await h.wait_for("error", count=3)
            assert [e.error.code for e in errors] == ["invalid_value", "invalid_item", "item_not_found"]

    run(main())


def test_truncating_the_response_in_progress_cancels_it_first() -> None:
    async def main() -> None:
        async with harness(word_delay_s=0.05) as h:
            await h.client(C.SessionUpdate(session=C.SessionParam(turn_detection=None)))
            await h.client(C.ConversationItemCreate(item=C.ItemParam(
                role="user", content=(C.ContentParam(type="input_text", text="hello"),))))
            await h.client(C.ResponseCreate())
            delta = (await h.wait_for("response.output_audio.delta", count=2))[1]
            await h.client(C.ConversationItemTruncate(item_id=delta.item_id, audio_end_ms=250))
            done = (await h.wait_for("response.done"))[0]
            assert done.response.status == "cancelled"
            assert done.response.status_details.reason == "client_cancelled"
            truncated = (await h.wait_for("conversation.item.truncated"))[0]
            assert truncated.item_id == delta.item_id
            assert (await h.backend.context_text()).endswith("assistant: one")

    run(main())


def test_manual_turns_with_commit_and_response_create() -> None:
    async def main() -> None:
        async with harness() as h:
            await h.client(C.SessionUpdate(session=C.SessionParam(
                audio=C.AudioParam(input=C.AudioInputParam(turn_detection=None)))))
            updated = (await h.wait_for("session.updated"))[0]
            assert updated.session.audio.input.turn_detection is None
            empty = await h.client(C.InputAudioBufferCommit())
            assert empty is not None and empty.code == "input_audio_buffer_commit_empty"
            pcm = utterance()
            await h.audio(pcm)
            await h.backend.wait_consumed(len(pcm))  # all of it went through: no VAD event
            assert "input_audio_buffer.speech_started" not in h.types()
            assert await h.client(C.InputAudioBufferCommit(event_id="c")) is None
            await h.wait_for("conversation.item.input_audio_transcription.completed")
            assert "response.created" not in h.types()
            await h.client(C.ResponseCreate(response=C.ResponseParam(metadata={"turn": "1"})))
            busy = await h.client(C.ResponseCreate())
            assert busy is not None and busy.code == "conversation_already_has_active_response"
            done = (await h.wait_for("response.done"))[0]
            assert done.response.metadata == {"turn": "1"}
            idle = await h.client(C.ResponseCancel())
            assert idle is not None and idle.code == "response_cancel_not_active"

    run(main())


def test_text_modality_streams_text_and_no_audio() -> None:
    async def main() -> None:
        async with harness() as h:
            await h.client(C.SessionUpdate(session=C.SessionParam(output_modalities=("text",))))
            await h.client(C.ConversationItemCreate(item=C.ItemParam(
                role="user", content=(C.ContentParam(type="input_text", text="hi"),))))
            await h.client(C.ResponseCreate())
            done = (await h.wait_for("response.done"))[0]
            assert "response.output_audio.delta" not in h.types()
            text = "".join(e.delta for e in h.sent if isinstance(e, S.OutputTextDelta))
            assert text == "one two three four five six"
            assert done.response.output[0].content[0].type == "output_text"
            assert done.response.output_modalities == ("text",)

    run(main())


@pytest.mark.parametrize(
    ("session", "code", "param"),
    [
        (C.SessionParam(audio=C.AudioParam(input=C.AudioInputParam(
            format=C.AudioFormatParam(type="audio/pcmu")))),
         "unsupported_audio_format", "session.audio.input.format.type"),
        (C.SessionParam(audio=C.AudioParam(input=C.AudioInputParam(
            format=C.AudioFormatParam(type="audio/pcm", rate=16000)))),
         "unsupported_audio_format", "session.audio.input.format.rate"),
        (C.SessionParam(input_audio_format="g711_ulaw"),
         "unsupported_audio_format", "session.input_audio_format"),
        (C.SessionParam(voice="nobody"), "unknown_voice", "session.voice"),
        (C.SessionParam(type="transcription"), "unsupported_session_type", "session.type"),
    ],
)
def test_session_update_refusals(session: C.SessionParam, code: str, param: str) -> None:
    async def main() -> None:
        async with harness() as h:
            err = await h.client(C.SessionUpdate(event_id="u1", session=session))
            assert err is not None and (err.code, err.param, err.event_id) == (code, param, "u1")
            assert "session.updated" not in h.types()
            assert h.session.settings == DEFAULTS

    run(main())


def test_session_update_applies_and_reports_settings() -> None:
    async def main() -> None:
        async with harness() as h:
            await h.client(C.SessionUpdate(session=C.SessionParam(
                instructions="talk like a pirate",
                audio=C.AudioParam(
                    input=C.AudioInputParam(turn_detection=C.TurnDetectionParam(
                        threshold=0.7, silence_duration_ms=800)),
                    output=C.AudioOutputParam(voice="alloy"),
                ),
            )))
            s = (await h.wait_for("session.updated"))[0].session
            assert s.instructions == "talk like a pirate"
            assert s.audio.output.voice == "joe"  # OpenAI names alias the default voice
            td = s.audio.input.turn_detection
            assert (td.threshold, td.silence_duration_ms, td.prefix_padding_ms) == (0.7, 800, 300)
            assert h.backend.settings.instructions == "talk like a pirate"
            await h.client(C.SessionUpdate(session=C.SessionParam(
                voice="amy", turn_detection=C.TurnDetectionParam(type="semantic_vad",
                                                                 eagerness="high"))))
            s = (await h.wait_for("session.updated", count=2))[1].session
            assert s.audio.output.voice == "amy"
            semantic = s.audio.input.turn_detection
            assert (semantic.type, semantic.eagerness) == ("semantic_vad", "high")
            td = h.backend.settings.turn_detection  # the server-VAD knobs are kept
            assert (td.type, td.eagerness, td.silence_duration_ms, td.threshold) == (
                "semantic_vad", "high", 300, 0.7)

    run(main())


@pytest.mark.parametrize(
    ("audio", "code"),
    [("!!notbase64!!", "invalid_audio"), (base64.b64encode(b"\x01\x02\x03").decode(), "invalid_audio")],
)
def test_bad_audio_is_refused_and_the_session_goes_on(audio: str, code: str) -> None:
    async def main() -> None:
        async with harness() as h:
            err = await h.client(C.InputAudioBufferAppend(audio=audio))
            assert err is not None and err.code == code and err.param == "audio"
            await h.audio(utterance())
            done = (await h.wait_for("response.done"))[0]
            assert done.response.status == "completed"

    run(main())


def test_unsupported_events_are_refused_by_name() -> None:
    async def main() -> None:
        async with harness() as h:
            for event in (C.ConversationItemDelete(item_id="x"), C.OutputAudioBufferClear()):
                err = await h.client(event)
                assert err is not None and err.code == "unsupported_event"
                assert event.type in err.message

    run(main())


def test_a_response_cut_before_its_first_word_keeps_an_empty_transcript() -> None:
    """Zero words heard: the item holds nothing, as the model's context does -- never the
    unspoken reply."""
    from assistant.serve.backend import contract as B

    async def main() -> None:
        h = Harness(FakeBackend(DEFAULTS))
        await h.session.handle_backend(B.ResponseStarted(response_key=7))
        await h.session.handle_backend(B.ResponseText(response_key=7, delta="All of this "))
        await h.session.handle_backend(B.ResponseText(response_key=7, delta="was unspoken."))
        await h.session.handle_backend(B.ResponseFinished(
            response_key=7, status="cancelled", reason="turn_detected", text=""))
        (done,) = await h.wait_for("response.done")
        item_id = done.response.output[0].id
        await h.client(C.ConversationItemRetrieve(item_id=item_id))
        (retrieved,) = await h.wait_for("conversation.item.retrieved")
        assert retrieved.item.content[0].transcript == ""

    run(main())


def test_a_withdrawn_reply_leaves_the_conversation_and_its_truncate_is_moot() -> None:
    """The user went on with their turn as the reply began: response.done, then the
    reply's item is deleted; the client's truncate (sent as it heard the user speak, before
    or after the deletion) cuts nothing and is no error."""
    from assistant.serve.backend import contract as B

    async def main() -> None:
        h = Harness(FakeBackend(DEFAULTS))
        for key, late in ((7, False), (8, True)):
            await h.session.handle_backend(B.ResponseStarted(response_key=key))
            await h.session.handle_backend(B.ResponseText(response_key=key, delta="Sure, "))
            await h.session.handle_backend(
                B.ResponseAudio(response_key=key, pcm=np.zeros(2400, np.int16).tobytes()))
            item_id = [e for e in h.sent if isinstance(e, S.OutputItemAdded)][-1].item.id
            truncate = C.ConversationItemTruncate(item_id=item_id, content_index=0,
                                                  audio_end_ms=40)
            if not late:  # before the deletion: held for the response's end, then moot
                assert await h.client(truncate) is None
            await h.session.handle_backend(B.ResponseFinished(
                response_key=key, status="cancelled", reason="turn_detected", withdrawn=True))
            deleted = await h.wait_for("conversation.item.deleted", count=key - 6)
            assert deleted[-1].item_id == item_id
            if late:
                assert await h.client(truncate) is None
            err = await h.client(C.ConversationItemRetrieve(item_id=item_id))
            assert err is not None and err.code == "item_not_found"
        assert not [e for e in h.sent if isinstance(e, S.ConversationItemTruncated)]
        assert not [e for e in h.sent if isinstance(e, S.Error)
                    and e.error.code != "item_not_found"]
        types = h.types()
        assert types.index("response.done") < types.index("conversation.item.deleted")

    run(main())
