"""bench/asr_numbers.py's scoring: the digits of a transcript in order, and its words
without the numerals, so "Room 204, please." and "Run 204, please." have the same digits
and different words."""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType

import pytest


@pytest.fixture
def asr_numbers(bench_import: Callable[[str], ModuleType]) -> ModuleType:
    return bench_import("asr_numbers")


def test_digits_and_words_score_a_transcript_apart(asr_numbers: ModuleType) -> None:
    said = "Room 2 0 4 please."
    assert asr_numbers.digits(said) == asr_numbers.digits("Run 204, please.") == "204"
    assert asr_numbers.words(said) == ["room", "please"]
    assert asr_numbers.words("Run 204, please.") == ["run", "please"]
    assert asr_numbers.digits("Call 550-500192") != asr_numbers.digits("Call 555 0192.")
    assert asr_numbers._right("Turn the volume to 40%.", "Turn the volume to 40 percent.") == \
        "digits right, words right"
    assert asr_numbers._right("H 312 line 4.", "Page 312, line 4.") == \
        "digits right, words wrong"


def test_both_sets_have_numerals_in_every_sentence(asr_numbers: ModuleType) -> None:
    sets = [w for w, _ in asr_numbers.NUMBER_TEXTS]
    assert sets.count("picked") == sets.count("check") == 12
    assert all(asr_numbers.digits(t) for _, t in asr_numbers.NUMBER_TEXTS)
