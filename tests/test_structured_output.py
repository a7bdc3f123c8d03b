"""`response_format` on the embedded engine: the grammar masks every token, so whatever the
model (the shipped tiny one, or the random test model) wants to write, its answer parses and
validates. Real forward passes, the real grammar library; nothing is mocked."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import openai
import pytest
import pytest_asyncio

from ling_local.config import load_profile
from ling_local.engines.base import GenerationRequest, Priority, SamplingParams
from ling_local.engines.embedded.torch_engine import TorchEngine
from ling_local.errors import RequestError
from tests.support import DaemonProcess, write_profile

# Nested objects, enums, arrays; bounded (maxLength, maxItems, a range) so that even a
# random model's answer fits in max_tokens.
SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 24},
        "kind": {"enum": ["function", "method", "class"]},
        "arguments": {
            "type": "array",
            "maxItems": 3,
            "items": {
                "type": "object",
                "properties": {
                    "name": {"type": "string", "maxLength": 16},
                    "annotation": {"enum": ["int", "str", "bool", None]},
                },
                "required": ["name", "annotation"],
                "additionalProperties": False,
            },
        },
        "returns": {
            "type": "object",
            "properties": {
                "type": {"enum": ["int", "str", "None"]},
                "nullable": {"type": "boolean"},
            },
            "required": ["type", "nullable"],
            "additionalProperties": False,
        },
        "lines": {"type": "integer", "minimum": 1, "maximum": 999},
    },
    "required": ["name", "kind", "arguments", "returns", "lines"],
    "additionalProperties": False,
}
PROMPT = (
    "def load_module(name: str, path=None) -> object:\n"
    "    return importlib.import_module(name)\n\n\n"
    "# load_module as a JSON record:\ninfo = "
)
MAX_TOKENS = 300

engine_loop = pytest.mark.asyncio(loop_scope="module")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def engine(profile_path: Path):
    e = TorchEngine(load_profile(str(profile_path)))
    await e.start()
    yield e
    await e.stop()


async def _generate(engine: TorchEngine, schema: dict, prompt: str = PROMPT, **sampling):
    request = GenerationRequest(
        prompt=prompt,
        priority=Priority.AGENT,
        sampling=SamplingParams(**{"max_tokens": MAX_TOKENS, **sampling}),
        json_schema=schema,
    )
    parts, last = [], None
    async for delta in engine.stream(request):
        parts.append(delta.text)
        last = delta
    return "".join(parts), last


@engine_loop
async def test_greedy_answer_validates_against_a_nested_schema(engine: TorchEngine) -> None:
    text, last = await _generate(engine, SCHEMA)
    jsonschema.validate(json.loads(text), SCHEMA)
    # the generation ends where the value ends, not at max_tokens
    assert last.finish_reason == "stop" and last.stats.completion_tokens < MAX_TOKENS
    assert last.stats.grammar_s > 0  # the grammar's time is reported (`ling.grammar_ms`)


@engine_loop
async def test_sampled_answers_validate_too(engine: TorchEngine) -> None:
    for seed in (1, 2, 3):
        text, _ = await _generate(engine, SCHEMA, temperature=1.0, seed=seed)
        jsonschema.validate(json.loads(text), SCHEMA)


@engine_loop
async def test_json_object_is_any_json_object(engine: TorchEngine) -> None:
    text, last = await _generate(engine, {"type": "object"}, max_tokens=MAX_TOKENS)
    assert last.finish_reason in ("stop", "length")
    if last.finish_reason == "stop":
        assert isinstance(json.loads(text), dict)
    else:  # the object was still open at max_tokens
        assert text.startswith("{")


@engine_loop
async def test_unconstrained_request_is_unchanged(engine: TorchEngine) -> None:
    plain = GenerationRequest(prompt=PROMPT, sampling=SamplingParams(max_tokens=8))
    deltas = [d async for d in engine.stream(plain)]
    first = "".join(d.text for d in deltas)
    assert deltas[-1].stats.grammar_s is None
    await _generate(engine, SCHEMA)  # a constrained request in between leaves nothing behind
    again = GenerationRequest(prompt=PROMPT, sampling=SamplingParams(max_tokens=8))
    assert "".join([d.text async for d in engine.stream(again)]) == first


@engine_loop
async def test_schemas_the_grammar_cannot_take_are_refused(engine: TorchEngine) -> None:
    with pytest.raises(RequestError, match="cannot be used for constrained decoding") as err:
        engine.check_json_schema({"not": {"type": "string"}})
    assert err.value.param == "response_format"


@engine_loop
async def test_the_gpu_unpacking_bans_the_same_tokens(engine: TorchEngine) -> None:
    """On a GPU the bitmask is unpacked on the device with torch ops (the CPU uses numpy):
    the same ops run here on CPU tensors and must ban exactly the same tokens."""
    import torch

    engine.check_json_schema(SCHEMA)  # waits for the grammar's vocabulary
    grammars = engine.grammars
    cpu, device_path = (grammars.constraint(SCHEMA, torch.device("cpu")) for _ in range(2))
    device_path._device_bits = torch.empty_like(device_path._bits)  # the GPU branch
    vocab = grammars.vocab_size
    for token_text in ('{"name": "', "load", '", "kind": "'):
        logits = torch.randn(vocab)
        a, b = cpu.mask(logits.clone()), device_path.mask(logits.clone())
        assert torch.equal(a.isinf(), b.isinf()) and 0 < int((~a.isinf()).sum()) < vocab
        for token in engine.tokenize(token_text):
            cpu.accept(token)
            device_path.accept(token)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def speculating_engine(model_dir: Path, draft_dir: Path, tmp_path_factory):
    """Prompt lookup and the draft both on: a greedy request would speculate."""
    profile = write_profile(
        tmp_path_factory.mktemp("spec") / "spec.toml",
        str(model_dir),
        engine={"speculative": "auto", "num_speculative_tokens": 4},
        model={"draft_path": str(draft_dir)},
    )
    e = TorchEngine(load_profile(str(profile)))
    await e.start()
    yield e
    await e.stop()


@engine_loop
async def test_speculation_is_bypassed_under_a_grammar(speculating_engine: TorchEngine) -> None:
    # The prompt holds text the lookup would copy (an invalid record, for this schema).
    bad = '{"name": "load_module", "kind": "module", "extra": [1, 2, 3]}\n'
    text, last = await _generate(speculating_engine, SCHEMA, prompt=bad * 3 + PROMPT)
    jsonschema.validate(json.loads(text), SCHEMA)
    assert last.stats.accept_length is None  # no verify steps ran


# ------------------------------------------------------------------ through the daemon
@pytest.fixture
def oai(daemon: DaemonProcess) -> openai.OpenAI:
    client = openai.OpenAI(base_url=daemon.url + "/v1", api_key=daemon.token, max_retries=0)
    yield client
    client.close()


def _format(schema: dict) -> dict:
    return {"type": "json_schema", "json_schema": {"name": "record", "schema": schema}}


def test_chat_and_completions_answer_in_the_schema(oai: openai.OpenAI) -> None:
    chat = oai.chat.completions.create(
        model="test",
        messages=[{"role": "user", "content": "Describe load_module as JSON."}],
        response_format=_format(SCHEMA),
        max_tokens=MAX_TOKENS,
        temperature=0.7,
        seed=5,
    )
    jsonschema.validate(json.loads(chat.choices[0].message.content), SCHEMA)
    parts = []
    for chunk in oai.completions.create(
        model="test",
        prompt=PROMPT,
        max_tokens=MAX_TOKENS,
        temperature=0,
        stream=True,
        extra_body={"response_format": _format(SCHEMA)},
    ):
        parts.append(chunk.choices[0].text)
    jsonschema.validate(json.loads("".join(parts)), SCHEMA)
    listed = oai.chat.completions.create(
        model="test",
        messages=[{"role": "user", "content": "Three numbers, please."}],
        response_format=_format(
            {
                "type": "array",
                "items": {"type": "integer", "minimum": 0, "maximum": 99},  # fits max_tokens
                "minItems": 3,
                "maxItems": 3,
            }
        ),
        max_tokens=64,
    )
    numbers = json.loads(listed.choices[0].message.content)
    assert len(numbers) == 3 and all(isinstance(n, int) and 0 <= n <= 99 for n in numbers)


@pytest.mark.parametrize(
    ("schema", "message"),
    [
        ({"type": "foo"}, "the JSON schema is invalid"),
        ({"type": "string", "pattern": "[a-"}, "the JSON schema is invalid"),
        ({"not": {"type": "string"}}, "cannot be used for constrained decoding"),
    ],
)
@pytest.mark.parametrize("stream", [False, True])
def test_bad_schemas_get_a_400(
    oai: openai.OpenAI, schema: dict, message: str, stream: bool
) -> None:
    with pytest.raises(openai.BadRequestError) as err:
        oai.chat.completions.create(
            model="test",
            messages=[{"role": "user", "content": "hi"}],
            response_format=_format(schema),
            stream=stream,
        )
    assert message in err.value.message and err.value.param == "response_format"


def test_response_format_with_a_suffix_is_refused(oai: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError, match="suffix"):
        oai.completions.create(
            model="test",
            prompt="x = ",
            suffix="\n",
            extra_body={"response_format": {"type": "json_object"}},
        )
