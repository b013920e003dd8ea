"""Replies under a JSON schema (`engine.grammar`): valid by construction, ended when whole.

On the tiny random Qwen2 (256 byte-ids): whatever the seed, temperature, top-k/top-p or
repetition penalty, a reply under a tool-call schema parses and validates against the
schema, and ends (EOS, every id kept, the turn closed) with the id that completed it. The
same model unconstrained writes no valid call, so the mask is what makes them valid.
"""

from __future__ import annotations

import json
import random
from typing import Any

import pytest
import torch

from engine import Engine, FinishReason, SamplingParams
from engine.grammar import (
    GrammarError,
    GrammarVocabulary,
    JsonSchemaConstraint,
    apply_bitmask,
    tool_call_schema,
)
from engine.loader import runner_from_hf_model
from engine.sampler import Sampler, sample_batch
from tests.engine.conftest import TINY_VOCAB
from tests.engine.fake_runner import ByteTokenizer, FakeRunner

EOS = 2
"""The tiny models' EOS id (byte 0x02, which JSON never contains)."""
END_OF_TURN = (3,)

TOOLS: dict[str, dict[str, Any]] = {
    "set_timer": {
        "type": "object",
        "properties": {"seconds": {"type": "integer", "minimum": 1, "maximum": 86400},
                       "label": {"type": "string", "maxLength": 12}},
        "required": ["seconds", "label"], "additionalProperties": False,
    },
    "get_weather": {
        "type": "object",
        "properties": {"city": {"type": "string", "maxLength": 12},
                       "unit": {"enum": ["celsius", "fahrenheit"]}},
        "required": ["city", "unit"], "additionalProperties": False,
    },
    "lights": {
        "type": "object",
        "properties": {"on": {"type": "boolean"}},
        "required": ["on"], "additionalProperties": False,
    },
}
"""Every value is bounded (strings by maxLength, integers by a range), so every path
through the grammar ends: a random model cannot write one string for ever."""
SCHEMA = tool_call_schema(TOOLS)

SAMPLINGS = [
    dict(temperature=0.0),
    dict(temperature=0.0, repetition_penalty=1.3),
    dict(temperature=0.7, top_p=0.9),
    dict(temperature=1.0, top_k=20),
    dict(temperature=1.5, repetition_penalty=1.2),
]


def schema_errors(value: Any, schema: dict[str, Any], path: str = "$") -> list[str]:
    """Where ``value`` breaks ``schema`` (the keywords `TOOLS` uses), empty when it
    validates."""
    if "anyOf" in schema:
        if any(not schema_errors(value, alt, path) for alt in schema["anyOf"]):
            return []
        return [f"{path}: matches no alternative"]
    errors: list[str] = []
    if "const" in schema and value != schema["const"]:
        errors.append(f"{path}: {value!r} != const {schema['const']!r}")
    if "enum" in schema and value not in schema["enum"]:
        errors.append(f"{path}: {value!r} not in {schema['enum']}")
    kind = schema.get("type")
    checks = {"object": dict, "string": str, "boolean": bool}
    if kind == "integer":
        if not isinstance(value, int) or isinstance(value, bool):
            return [*errors, f"{path}: {value!r} is not an integer"]
        if not schema.get("minimum", value) <= value <= schema.get("maximum", value):
            errors.append(f"{path}: {value} out of range")
    elif kind in checks and not isinstance(value, checks[kind]):
        return [*errors, f"{path}: {value!r} is not {kind}"]
    if kind == "string" and len(value) > schema.get("maxLength", len(value)):
        errors.append(f"{path}: {value!r} longer than {schema['maxLength']}")
    if kind == "object":
        props = schema.get("properties", {})
        errors += [f"{path}: missing {key}" for key in schema.get("required", [])
                   if key not in value]
        if schema.get("additionalProperties") is False:
            errors += [f"{path}: extra {key}" for key in value if key not in props]
        for key, sub in props.items():
            if key in value:
                errors += schema_errors(value[key], sub, f"{path}.{key}")
    return errors


def call_errors(text: str) -> list[str]:
    """Why ``text`` is not a valid call of one of `TOOLS`."""
    try:
        value = json.loads(text)
    except ValueError as exc:
        return [f"not JSON: {exc}"]
    return schema_errors(value, SCHEMA)


def test_the_checker_itself_tells_valid_calls_from_invalid_ones() -> None:
    assert call_errors('{"name":"lights","arguments":{"on":true}}') == []
    assert call_errors('{"name":"get_weather","arguments":{"city":"Oslo","unit":"celsius"}}'
                       ) == []
    for bad in ('{"name":"lights","arguments":{"on":1}}',
                '{"name":"lights","arguments":{}}',
                '{"name":"get_weather","arguments":{"city":"Oslo","unit":"kelvin"}}',
                '{"name":"set_timer","arguments":{"seconds":0,"label":"x"}}',
                '{"name":"nap","arguments":{"on":true}}',
                '{"name":"lights","arguments":{"on":true},"x":1}',
                '{"name":"lights"'):
        assert call_errors(bad), bad


# ---- on the tiny random Qwen2 -------------------------------------------------------


@pytest.fixture(scope="module")
def byte_vocabulary() -> GrammarVocabulary:
    return GrammarVocabulary.from_pieces([bytes([b]) for b in range(TINY_VOCAB)],
                                         stop_token_ids=[EOS])


@pytest.fixture()
def engine(tiny_qwen2: Any, byte_vocabulary: GrammarVocabulary) -> Engine:
    runner = runner_from_hf_model(tiny_qwen2, page_size=16, num_pages=512,
                                  eos_token_ids=(EOS,))
    return Engine(runner, ByteTokenizer(), max_batch=16, prefill_chunk=64,
                  grammar_vocabulary=byte_vocabulary)


def prompts(count: int, seed: int = 0) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(4, TINY_VOCAB) for _ in range(rng.randrange(5, 12))]
            for _ in range(count)]


def run_jobs(engine: Engine, params: list[SamplingParams], prompt_ids: list[list[int]]
             ) -> list[Any]:
    """Every job in the same steps (batched decode), checking the cache after each step;
    returns (job, sequence, prompt) per job, sequences still live."""
    seqs = [engine.sequence() for _ in params]
    jobs = [engine.enqueue(seq, p, prompt_ids=ids)
            for seq, p, ids in zip(seqs, params, prompt_ids, strict=True)]
    while engine.has_work():
        engine.step()
        engine.check()
    return list(zip(jobs, seqs, prompt_ids, strict=True))


def test_constrained_replies_are_valid_calls_whatever_the_sampling(engine: Engine) -> None:
    params = [SamplingParams(max_new_tokens=256, seed=seed, json_schema=json.dumps(SCHEMA),
                             end_of_turn=END_OF_TURN, **sampling)
              for sampling in SAMPLINGS for seed in range(4)]
    names = set()
    for job, seq, prompt in run_jobs(engine, params, prompts(len(params))):
        result = job.result
        assert result is not None
        text = bytes(result.token_ids).decode()
        assert call_errors(text) == [], (job.params, text)
        assert result.text == text
        names.add(json.loads(text)["name"])
        # Ended by the grammar with the id that completed the document: nothing sampled
        # after it, no decode step for it, and the turn closed behind it.
        assert result.finish_reason is FinishReason.EOS
        assert result.sampled_tokens == len(result.token_ids)
        assert result.decode_steps == len(result.token_ids) - 1
        assert seq.tokens == tuple(prompt) + result.token_ids + END_OF_TURN
        seq.release()
    assert len(names) > 1, "every reply called the same tool: the alternatives are untested"
    engine.check()


def test_unconstrained_replies_of_the_same_model_are_not_valid_calls(engine: Engine) -> None:
    params = [SamplingParams(max_new_tokens=96, seed=seed, **sampling)
              for sampling in SAMPLINGS for seed in range(4)]
    for job, seq, _ in run_jobs(engine, params, prompts(len(params))):
        assert job.result is not None
        assert call_errors(bytes(job.result.token_ids).decode("utf-8", "replace")), job.params
        seq.release()


def test_constrained_and_plain_jobs_share_a_batch(engine: Engine, tiny_qwen2: Any) -> None:
    """A plain greedy job decoded beside constrained ones is what it is alone
    (transformers' greedy continuation); the constrained rows are sampled apart."""
    plain_prompt, *others = prompts(4, seed=5)
    constrained = SamplingParams(max_new_tokens=256, json_schema=json.dumps(SCHEMA))
    params = [SamplingParams(max_new_tokens=24), constrained, constrained,
              SamplingParams(max_new_tokens=256, temperature=0.8, seed=1,
                             json_schema=json.dumps(SCHEMA))]
    done = run_jobs(engine, params, [plain_prompt, *others])
    with torch.inference_mode():
        out = tiny_qwen2.generate(torch.tensor([plain_prompt]), max_new_tokens=24,
                                  min_new_tokens=24, do_sample=False, eos_token_id=None,
                                  pad_token_id=0)
    plain = done[0][0].result
    assert plain is not None and plain.finish_reason is FinishReason.LENGTH
    assert list(plain.token_ids) == [int(t) for t in out[0, len(plain_prompt):]]
    for job, _, _ in done[1:]:
        assert call_errors(job.result.text) == [], job.result.text


def test_a_reply_cut_by_max_new_tokens_is_a_prefix_of_a_valid_call(engine: Engine,
                                                                   byte_vocabulary) -> None:
    [(job, seq, _)] = run_jobs(
        engine, [SamplingParams(max_new_tokens=12, json_schema=json.dumps(SCHEMA))],
        prompts(1, seed=3))
    result = job.result
    assert result.finish_reason is FinishReason.LENGTH and len(result.token_ids) == 12
    # The grammar took every id: they are a prefix it still accepts.
    constraint = JsonSchemaConstraint(byte_vocabulary.compile(SCHEMA))
    for token in result.token_ids:
        assert token in constraint.allowed()
        constraint.advance(token)
    assert not constraint.is_done()


def test_a_schema_the_compiler_refuses_fails_at_enqueue(engine: Engine) -> None:
    with engine.sequence() as seq:
        bad = SamplingParams(json_schema=json.dumps({"type": "no such type"}))
        with pytest.raises(GrammarError, match="no such type"):
            engine.enqueue(seq, bad, prompt_ids=[5, 6, 7])
        assert not engine.has_work()
        engine.check()


# ---- the constraint itself ------------------------------------------------------------


def test_const_and_enum_allow_only_their_own_spelling(byte_vocabulary) -> None:
    constraint = JsonSchemaConstraint(byte_vocabulary.compile(SCHEMA))
    assert constraint.allowed() == [ord("{")]
    for byte in b'{"name":"':
        constraint.advance(byte)
    assert sorted(constraint.allowed()) == sorted({ord(name[0]) for name in TOOLS})
    for byte in b'get_weather","arguments":{"city":"Oslo","unit":"':
        constraint.advance(byte)
    assert sorted(constraint.allowed()) == [ord("c"), ord("f")]
    for byte in b"celsius":
        constraint.advance(byte)
    assert constraint.allowed() == [ord('"')]
    with pytest.raises(GrammarError):
        constraint.advance(ord("x"))
    for byte in b'"}':
        constraint.advance(byte)
        assert not constraint.is_done()
    constraint.advance(ord("}"))
    assert constraint.is_done()
    assert constraint.allowed() == [EOS]
    with pytest.raises(GrammarError):
        constraint.advance(EOS)


def test_mask_keeps_the_allowed_logits_and_leaves_the_row_alone(byte_vocabulary) -> None:
    constraint = JsonSchemaConstraint(byte_vocabulary.compile(SCHEMA))
    logits = torch.randn(TINY_VOCAB, generator=torch.Generator().manual_seed(0))
    before = logits.clone()
    masked = constraint.mask(logits)
    assert torch.equal(logits, before)
    allowed = torch.isfinite(masked)
    assert allowed.nonzero().flatten().tolist() == [ord("{")]
    assert masked[ord("{")] == logits[ord("{")]


def test_apply_bitmask_covers_ids_past_the_mask() -> None:
    logits = torch.arange(70, dtype=torch.float32)
    bitmask = torch.tensor([0b101, -1], dtype=torch.int32)  # ids 0, 2 and 32..63
    masked = apply_bitmask(logits, bitmask)
    kept = torch.isfinite(masked).nonzero().flatten().tolist()
    assert kept == [0, 2, *range(32, 64)]
    assert torch.equal(masked[kept], logits[kept])


def test_sampler_masks_before_penalty_and_temperature(byte_vocabulary) -> None:
    """The allowed ids' own logits are the worst of the row and the penalised id the best:
    every pick is still an allowed id, and the constraint follows it."""
    schema = json.dumps({"enum": ["ab", "ba"]})
    logits = torch.zeros(TINY_VOCAB)
    logits[ord('"')] = -50.0
    logits[ord("x")] = 100.0
    for temperature in (0.0, 2.0):
        params = SamplingParams(temperature=temperature, repetition_penalty=5.0,
                                json_schema=schema)
        sampler = Sampler(params, constraint=JsonSchemaConstraint(
            byte_vocabulary.compile(schema)))
        picks = [sampler.sample(logits, recent=[ord("x")]) for _ in range(4)]
        assert bytes(picks).decode() in ('"ab"', '"ba"')
        assert sampler.complete


def test_sample_batch_sends_constrained_rows_through_their_sampler(byte_vocabulary) -> None:
    schema = json.dumps({"const": "hi"})
    constrained = Sampler(SamplingParams(json_schema=schema),
                          constraint=JsonSchemaConstraint(byte_vocabulary.compile(schema)))
    plain = Sampler(SamplingParams())
    logits = torch.zeros(2, TINY_VOCAB)
    logits[:, ord("z")] = 10.0
    assert sample_batch([plain, constrained], logits) == [ord("z"), ord('"')]
    assert sample_batch([plain, constrained], logits) == [ord("z"), ord("h")]


def test_a_sampler_and_its_params_agree_on_the_schema(byte_vocabulary) -> None:
    schema = json.dumps({"const": "hi"})
    with pytest.raises(ValueError, match="json_schema"):
        Sampler(SamplingParams(json_schema=schema))
    with pytest.raises(ValueError, match="json_schema"):
        Sampler(SamplingParams(),
                constraint=JsonSchemaConstraint(byte_vocabulary.compile(schema)))


def test_params_keep_the_schema_as_canonical_text() -> None:
    spaced = '{"type": "object",\n "properties": {"b": {}, "a": {}}}'
    params = SamplingParams(json_schema=spaced)
    assert params.json_schema == '{"type":"object","properties":{"b":{},"a":{}}}'
    assert params == SamplingParams(json_schema=params.json_schema)
    hash(params)
    for bad in ("[1, 2]", "{", '"text"'):
        with pytest.raises(ValueError):
            SamplingParams(json_schema=bad)


def test_tool_call_schema_has_one_alternative_per_tool() -> None:
    one = tool_call_schema({"lights": TOOLS["lights"]})
    assert one["properties"]["name"] == {"const": "lights"}
    assert [alt["properties"]["name"]["const"] for alt in SCHEMA["anyOf"]] == list(TOOLS)
    with pytest.raises(ValueError):
        tool_call_schema({})


# ---- a transformers tokenizer ---------------------------------------------------------


def test_the_engine_reads_a_transformers_tokenizers_vocabulary() -> None:
    """A byte-level BPE tokenizer built here (merged pieces, a special EOS): the engine
    builds its grammar vocabulary from it on the first constrained job, and the reply's
    text, decoded by that tokenizer, is a valid call."""
    import transformers
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    corpus = [json.dumps({"name": n, "arguments": {"city": "Oslo", "unit": "celsius",
                                                   "on": True, "label": "tea"}})
              for n in TOOLS] * 20
    backend.train_from_iterator(corpus, trainers.BpeTrainer(
        vocab_size=320, special_tokens=["<|eos|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tokenizer = transformers.PreTrainedTokenizerFast(tokenizer_object=backend,
                                                     eos_token="<|eos|>")
    eos = tokenizer.convert_tokens_to_ids("<|eos|>")
    assert len(tokenizer) > 257  # merges beyond the 256 bytes
    runner = FakeRunner(vocab_size=len(tokenizer), eos_token_ids=(eos,), num_pages=128)
    engine = Engine(runner, tokenizer)
    prompt = tokenizer.encode("call a tool", add_special_tokens=False)
    for seed, temperature in ((0, 0.0), (1, 1.0), (2, 1.5)):
        with engine.sequence() as seq:
            job = engine.enqueue(seq, SamplingParams(
                max_new_tokens=200, temperature=temperature, seed=seed,
                json_schema=json.dumps(SCHEMA)), prompt_ids=prompt)
            while engine.has_work():
                engine.step()
            assert job.result is not None
            assert job.result.finish_reason is FinishReason.EOS
            assert call_errors(tokenizer.decode(list(job.result.token_ids))) == []
    engine.check()


# ---- the packaged SmolLM2 (slow) ------------------------------------------------------


def test_smollm2_writes_valid_calls_and_unconstrained_it_does_not(llm_dir: Any) -> None:
    """The default model's own tokenizer (49,152 ids, read by the engine itself): asked for
    a tool call, greedy and sampled replies under the schema are valid calls that end
    when whole; the same requests unconstrained are not."""
    from engine.chat_template import ChatTemplate

    engine = Engine.load(llm_dir, dtype="float32", page_size=16, num_pages=256)
    template = ChatTemplate(engine.tokenizer)
    asks = ["Set a timer for five minutes for the tea.", "What's the weather in Oslo?"]
    prompt_ids = [template.render_ids(
        [{"role": "system", "content": "Answer with one tool call as JSON."},
         {"role": "user", "content": ask}], add_generation_prompt=True) for ask in asks]
    eot = template.end_of_turn_ids
    schema = json.dumps(SCHEMA)
    constrained = [SamplingParams(max_new_tokens=96, json_schema=schema, end_of_turn=eot,
                                  temperature=t, seed=1) for t in (0.0, 0.8)]
    for job, seq, prompt in run_jobs(engine, constrained * 2,
                                     [p for p in prompt_ids for _ in range(2)]):
        assert job.result.finish_reason is FinishReason.EOS
        assert call_errors(job.result.text) == [], job.result.text
        assert seq.tokens == tuple(prompt) + job.result.token_ids + eot
    plain = [SamplingParams(max_new_tokens=96, end_of_turn=eot)] * 2
    for job, _, _ in run_jobs(engine, plain, prompt_ids):
        assert call_errors(job.result.text), job.result.text
