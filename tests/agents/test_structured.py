"""Schema steps: the answer is parsed and validated into a typed value; an invalid answer
is asked again with the validation error, a bounded number of times."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest
from pydantic import BaseModel, field_validator

from ling_local.agents import Chain, ChainFinished, Prompt, RunLog, StepRetry, StepStarted
from ling_local.agents.structured import (
    Invalid,
    Schema,
    close_partial,
    parse_answer,
    strict_schema,
)
from ling_local.client import AsyncClient
from ling_local.errors import StructuredOutputError
from tests.agents.conftest import agent_requests
from tests.support import DaemonProcess


class Recorder(httpx.AsyncHTTPTransport):
    """The real loopback transport, keeping the JSON body of every POST it sends."""

    def __init__(self) -> None:
        super().__init__()
        self.bodies: list[dict] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.method == "POST":
            self.bodies.append(json.loads(request.content))
        return await super().handle_async_request(request)


class Function(BaseModel):
    name: str


# A code model continues code: the prompt ends where a variable's value starts, and the
# daemon's grammar makes that value a JSON object of the schema's shape.
EXTRACT = Prompt(
    "extract",
    "import json\n\nsource = '''{{ code }}'''\n# the function defined in `source`:\nfound = ",
    mode="complete",
    stop=["\n"],
    schema=Function,
    max_tokens=48,
    temperature=0.0,
)


async def test_schema_step_returns_a_validated_typed_value(
    daemon: DaemonProcess, run_log: RunLog
) -> None:
    recorder = Recorder()
    chain = Chain("extract", [EXTRACT, Prompt("use", "Call {{ extract.name }}()", max_tokens=2)])
    async with AsyncClient(daemon.url, daemon.token, transport=recorder) as client:
        run = chain.astart(
            code="def area(r):\n    return 3.14 * r * r\n", client=client, run_log=run_log
        )
        events = [e async for e in run.events()]
    done = events[-1]
    assert isinstance(done, ChainFinished)
    value = done.outputs["extract"]
    assert isinstance(value, Function)
    assert not any(isinstance(e, StepRetry) for e in events)
    use = next(e for e in events if isinstance(e, StepStarted) and e.name == "use")
    assert use.prompt == f"Call {value.name}()"  # the typed value feeds the next template
    first = recorder.bodies[0]
    sent = first["response_format"]["json_schema"]["schema"]
    assert sent == {**Function.model_json_schema(), "additionalProperties": False}
    assert first["prompt"].endswith("found = ") and first["priority"] == "agent"
    # the run log keeps JSON and types it again on resume
    assert run_log.get(run.run_id).steps[0].output == value.model_dump()
    again = await chain.aresume(run.run_id, client=daemon.url, run_log=run_log).result()
    assert again.outputs["extract"] == value


class Impossible(BaseModel):
    """Valid JSON for the grammar, never valid for the validator (which a JSON schema, and
    so the grammar, cannot express)."""

    checksum: str

    @field_validator("checksum")
    @classmethod
    def _matches_the_file(cls, value: str) -> str:
        raise ValueError("does not match the file's checksum")


def test_bad_output_is_reasked_a_bounded_number_of_times(
    daemon: DaemonProcess, run_log: RunLog
) -> None:
    step = Prompt("verify", "Return the checksum.", schema=Impossible, max_tokens=12, max_reasks=2)
    recorder = Recorder()
    before = agent_requests(daemon)

    async def go():
        async with AsyncClient(daemon.url, daemon.token, transport=recorder) as client:
            run = Chain("bad", [step]).astart(client=client, run_log=run_log)
            return run, [e async for e in run.events()]

    run, events = asyncio.run(go())
    err = run.error
    assert isinstance(err, StructuredOutputError)
    assert err.attempts == 3 and len(err.errors) == 3 and err.step == "verify"
    assert agent_requests(daemon) - before == 3  # one ask + two re-asks, then it gives up
    retries = [e for e in events if isinstance(e, StepRetry)]
    assert [r.attempt for r in retries] == [2, 3]
    assert len(recorder.bodies) == 3
    for body, error in zip(recorder.bodies[1:], err.errors[:2], strict=True):
        # a re-ask shows the model its previous answer and what was wrong with it
        assert body["messages"][-2]["role"] == "assistant"
        assert error in body["messages"][-1]["content"]
        assert body["response_format"]["type"] == "json_schema"
    assert "JSON schema" in recorder.bodies[0]["messages"][-1]["content"]
    assert run_log.get(run.run_id).status == "failed"


# ---------------------------------------------------------------- the parser (no daemon)
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"a": 1}', {"a": 1}),
        ('Sure! Here it is:\n```json\n{"a": [1, 2]}\n```\nAnything else?', {"a": [1, 2]}),
        ('The answer is {"a": "x"} as requested.', {"a": "x"}),
        ("{'a': True, 'b': None}", {"a": True, "b": None}),
        ('{"name": "Ada Lovel', {"name": "Ada Lovel"}),  # cut off by max_tokens
        ('{"a": [1, 2', {"a": [1, 2]}),
    ],
)
def test_parser_reads_what_models_write(text: str, expected: object) -> None:
    assert parse_answer(text) == expected


def test_strict_schema_closes_objects_but_not_data() -> None:
    schema = {
        "type": "object",
        "properties": {
            "properties": {"type": "object", "properties": {"x": {"type": "integer"}}},
            "tags": {"type": "array", "items": {"$ref": "#/$defs/tag"}},
            "extra": {"type": "object", "additionalProperties": True, "properties": {}},
        },
        "required": ["properties"],
        "$defs": {"tag": {"properties": {"name": {"enum": [{"properties": 1}]}}}},
    }
    strict = strict_schema(schema)
    assert strict["additionalProperties"] is False
    nested = strict["properties"]["properties"]
    assert nested["additionalProperties"] is False
    assert "additionalProperties" not in nested["properties"]
    assert strict["properties"]["extra"]["additionalProperties"] is True  # said otherwise
    tag = strict["$defs"]["tag"]
    assert tag["additionalProperties"] is False
    assert tag["properties"]["name"] == {"enum": [{"properties": 1}]}  # data, untouched
    assert "additionalProperties" not in schema  # the caller's schema is not changed


def test_parser_and_schema_errors_are_messages_for_the_model() -> None:
    with pytest.raises(Invalid, match="not valid JSON"):
        parse_answer("no json here")
    schema = Schema.of(
        {"type": "object", "required": ["n"], "properties": {"n": {"type": "integer"}}}
    )
    with pytest.raises(Invalid, match="'n' is a required property"):
        schema.check('{"m": 1}')
    with pytest.raises(Invalid, match="n: 'x' is not of type 'integer'"):
        schema.check('{"n": "x"}')
    assert schema.check('{"n": 3}') == {"n": 3}
    with pytest.raises(Invalid, match="checksum: Value error, does not match"):
        Schema.of(Impossible).check('{"checksum": "nope"}')
    assert close_partial('{"a": "x\\') == '{"a": "x"}'
    assert close_partial('{"a": 1, "b":') == '{"a": 1, "b": null}'
