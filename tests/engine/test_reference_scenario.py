"""The exllamav2 dynamic-generator reference scenario, reproduced on the fake runner.

With 256-token pages: three prompts = 400-token prefix + 200-token middle + suffixes of
80/81/82 tokens, 300 new tokens each, run as one batch. The first prompt is computed in
full (680); the others reference the two full pages (512 tokens), copy the 88 shared
tokens of the third page from the first prompt's partial page, and compute only their
suffix (81, 82): 843 prompt tokens. A second batch with a different middle references the
first page (256), copies the 144 prefix tokens of the second page, computes 280, and the
other two again compute only their suffixes: 280 + 81 + 82 = 443.

How generated tokens are counted: they are not prompt tokens. Each of the 300 sampled
tokens but the last has its K/V written by a batched decode step (`tokens_decoded`); the
last one is written when the generation finishes (a 1-token extend, counted in the
engine's `tokens_computed` but not in any prompt's `PrefillStats`).
"""

from __future__ import annotations

import random

from engine import SamplingParams
from tests.engine.fake_runner import assert_cache_matches, make_engine

PAGE = 256


def run_batch(engine, prompts: list[list[int]]) -> list:  # type: ignore[no-untyped-def]
    seqs = [engine.sequence() for _ in prompts]
    jobs = [engine.enqueue(seq, SamplingParams(max_new_tokens=300), prompt_ids=prompt)
            for seq, prompt in zip(seqs, prompts, strict=True)]
    while engine.has_work():
        engine.step()
    results = [job.result for job in jobs]
    for seq in seqs:
        seq.release()
    return results


def test_exllamav2_reference_scenario() -> None:
    engine, runner = make_engine(page_size=PAGE, num_pages=64, vocab_size=256)
    rng = random.Random(1234)

    def tokens(n: int) -> list[int]:
        return [rng.randrange(256) for _ in range(n)]

    prefix, middle, other_middle = tokens(400), tokens(200), tokens(200)
    suffixes = [tokens(80), tokens(81), tokens(82)]

    first = run_batch(engine, [prefix + middle + s for s in suffixes])
    assert sum(r.prompt.computed for r in first) == 843
    assert [r.prompt.computed for r in first] == [680, 81, 82]
    assert [(r.prompt.referenced, r.prompt.copied) for r in first] == \
        [(0, 0), (512, 88), (512, 88)]
    assert all(r.sampled_tokens == 300 for r in first)
    decoded = engine.stats().tokens_decoded
    assert decoded == 3 * 299

    second = run_batch(engine, [prefix + other_middle + s for s in suffixes])
    assert sum(r.prompt.computed for r in second) == 443
    assert [(r.prompt.computed, r.prompt.referenced, r.prompt.copied) for r in second] == \
        [(280, 256, 144), (81, 512, 88), (82, 512, 88)]
    assert engine.stats().tokens_decoded == 2 * decoded

    assert_cache_matches(engine, runner)
    stats = engine.stats()
    assert stats.pages_used == 0
    assert stats.pages_free + stats.pages_cached == stats.pages_total
