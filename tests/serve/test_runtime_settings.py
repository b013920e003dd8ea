"""What the daemon's runtime changes in the configured conversation settings: one engine
and one pair of cores serve every session."""

from __future__ import annotations

import pytest

from tests.serve.tool_runtime import scripted_runtime


@pytest.mark.parametrize(("override", "partials"), [({}, False),
                                                    ({"server.listening_partials": True}, True)])
def test_sessions_decode_the_users_turn_at_its_pauses_unless_configured(
        override: dict[str, object], partials: bool) -> None:
    runtime = scripted_runtime(overrides=override)
    try:
        pipeline = runtime.settings.pipeline
        assert pipeline.listening_partials is partials
        assert pipeline.pause_priority is False  # a pause in one holds no other's steps
    finally:
        runtime.close()
