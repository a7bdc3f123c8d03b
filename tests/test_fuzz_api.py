"""Property-based fuzzing of the generation routes against a real daemon (uvicorn on
loopback, the embedded tiny model): at least 2,000 generated requests per run, hostile
shapes included (wrong types, huge numbers, deep nesting, lone surrogates, invalid UTF-8,
truncated bodies, extra fields, stop lists, n, logprobs, streams), and not one 5xx.

Every answer must be JSON (an OpenAI-style error for a refusal) or an SSE stream whose last
event is ``data: [DONE]`` (an error event, when there is one, just before it); the daemon
must be healthy and serving afterwards. The fields come from the daemon's own
``/openapi.json``, so a field added to the request schemas is fuzzed too. The run's figures
(requests sent, 5xx seen, seconds) are printed at the end of the module.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support import DaemonProcess, start_daemon, write_profile

ROUTES = {"/v1/completions": "CompletionRequest", "/v1/chat/completions": "ChatCompletionRequest"}
#: Generated bodies per run, each sent to both routes: with the fixed cases, > 2,000 requests.
EXAMPLES = 1000
STATS = {"sent": 0, "5xx": 0, "streams": 0, "ok": 0, "4xx": 0, "started": 0.0}
REFUSALS: Counter[str] = Counter()
RAW = "\x00raw\x00"  # placeholder replaced by raw JSON text after serialisation


@pytest.fixture(scope="module")
def fuzz_daemon(model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> DaemonProcess:
    home = tmp_path_factory.mktemp("fuzz")
    profile = write_profile(
        home / "fuzz.toml",
        str(model_dir),
        name="fuzz",
        # Small limits keep each accepted request to a few decode steps.
        sampling={"completion_max_tokens": 2, "chat_max_tokens": 2},
        limits={"max_tokens": 3, "max_body_bytes": 64 * 1024, "max_stop": 4},
        model={"context_length": 256},
        scheduler={"max_queue": 256},
    )
    daemon = start_daemon(profile, home)
    STATS["started"] = time.monotonic()
    yield daemon
    daemon.stop()


@pytest.fixture(scope="module")
def http(fuzz_daemon: DaemonProcess):
    with fuzz_daemon.http() as client:
        client.timeout = httpx.Timeout(30.0)
        yield client


@pytest.fixture(scope="module")
def fields(http: httpx.Client) -> dict[str, list[str]]:
    schemas = http.get("/openapi.json").json()["components"]["schemas"]
    return {route: sorted(schemas[name]["properties"]) for route, name in ROUTES.items()}


# ----------------------------------------------------------------------------- values
surrogates = st.sampled_from(["\ud800", "\udfff", "a\udc00b", "\udbff\ud800", "x\ud83d"])
texts = st.one_of(
    st.text(max_size=40),
    st.text(st.characters(codec="utf-8"), max_size=20),
    surrogates,
    st.sampled_from(["", " ", "def f(x):\n    return", "<|endoftext|>", "\x00", "\u2028"]),
)
huge_ints = st.one_of(
    st.integers(-(2**70), 2**70),
    st.sampled_from([2**63, 2**64, -(2**63) - 1, 2**64 - 1, -(2**63), 10**400]),
)
floats = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([5e-324, 1e-310, 1e-38, 1e-40, 1e-5, 0.0, -0.0, 2.0, 2.0000001, 1e308]),
)
raw_json = st.one_of(  # text that json.dumps cannot produce: inserted verbatim
    st.integers(1, 1500).map(lambda n: "[" * n + "]" * n),
    st.integers(1, 600).map(lambda n: '{"a":' * n + "1" + "}" * n),
    st.integers(4290, 4400).map(lambda n: "9" * n),
    st.sampled_from(["NaN", "Infinity", "-Infinity", "1e99999", "-0", "0x10", "01", "tru"]),
)
scalars = st.one_of(st.none(), st.booleans(), huge_ints, floats, texts, st.just(RAW))
anything = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=8,
)
small_ints = st.one_of(st.integers(-2, 6), huge_ints)
messages = st.lists(
    st.fixed_dictionaries(
        {
            "role": st.one_of(
                st.sampled_from(["system", "developer", "user", "assistant", "tool"]), anything
            ),
            "content": st.one_of(
                texts,
                st.none(),
                st.lists(
                    st.fixed_dictionaries(
                        {"type": st.sampled_from(["text", "image_url", 3]), "text": texts}
                    ),
                    max_size=3,
                ),
                anything,
            ),
        },
        optional={"name": texts, "extra": anything},
    ),
    max_size=4,
)
FIELD_VALUES = {
    "prompt": st.one_of(texts, st.lists(small_ints, max_size=8), st.lists(texts, max_size=3)),
    "suffix": texts,
    "messages": st.one_of(messages, anything),
    "max_tokens": small_ints,
    "max_completion_tokens": small_ints,
    "temperature": floats,
    "top_p": floats,
    "n": small_ints,
    "best_of": small_ints,
    "seed": huge_ints,
    "stream": st.one_of(st.booleans(), anything),
    "stream_options": st.one_of(
        st.fixed_dictionaries(
            {"include_usage": st.booleans(), "continuous_usage_stats": st.booleans()}
        ),
        anything,
    ),
    "stop": st.one_of(texts, st.lists(texts, max_size=6), anything),
    "logprobs": st.one_of(st.booleans(), small_ints, anything),
    "echo": st.one_of(st.booleans(), anything),
    "priority": st.one_of(st.sampled_from(["completion", "chat", "agent", "urgent"]), anything),
    "supersede_key": st.one_of(texts, st.sampled_from(["doc-1", "doc-2"]), anything),
    "ignore_eos": st.one_of(st.booleans(), anything),
    "model": st.one_of(st.sampled_from(["fuzz", "gpt-4"]), texts, anything),
    "tools": st.one_of(st.just([]), st.lists(anything, max_size=2), anything),
    "response_format": st.one_of(
        st.fixed_dictionaries({"type": st.sampled_from(["text", "json_object"])}),
        anything,
    ),
}


plain = st.text(max_size=30)  # no lone surrogates
VALID = {
    "prompt": st.one_of(plain.filter(bool), st.lists(st.integers(0, 200), min_size=1, max_size=8)),
    "messages": st.lists(
        st.fixed_dictionaries(
            {
                "role": st.sampled_from(["system", "developer", "user", "assistant", "tool"]),
                "content": st.one_of(
                    plain.filter(bool),
                    st.lists(
                        st.fixed_dictionaries({"type": st.just("text"), "text": plain}),
                        min_size=1,
                        max_size=2,
                    ),
                ),
            }
        ),
        min_size=1,
        max_size=3,
    ),
    "max_tokens": st.integers(1, 3),
    "temperature": st.one_of(st.floats(0, 2), st.sampled_from([5e-324, 1e-40, 1e-5])),
    "top_p": st.floats(1e-9, 1),
    "n": st.just(1),
    "seed": st.integers(-(2**63), 2**63 - 1),
    "stream": st.booleans(),
    "stream_options": st.fixed_dictionaries(
        {"include_usage": st.booleans(), "continuous_usage_stats": st.booleans()}
    ),
    "stop": st.one_of(plain.filter(bool), st.lists(plain.filter(bool), max_size=4)),
    "logprobs": st.sampled_from([None, False]),
    "priority": st.sampled_from(["completion", "chat", "agent"]),
    "supersede_key": st.sampled_from(["doc-1", "doc-2", "doc-3"]),
    "ignore_eos": st.booleans(),
    "model": st.just("fuzz"),
    "suffix": plain,
    "response_format": st.fixed_dictionaries({"type": st.sampled_from(["text", "json_object"])}),
}


def _body(draw, names: list[str]) -> dict:
    """A valid request (both routes' required fields), one with a few fields spoilt, or
    one built from hostile values throughout."""
    mode = draw(st.sampled_from(["valid", "valid", "spoilt", "hostile"]))
    body: dict = {}
    if mode != "hostile":
        body["prompt"] = draw(VALID["prompt"])
        body["messages"] = draw(VALID["messages"])
        for name in names:
            if name in VALID and name not in body and draw(st.integers(0, 9)) < 4:
                body[name] = draw(VALID[name])
        body["stream"] = draw(VALID["stream"])
        if isinstance(body["prompt"], list):
            body.pop("suffix", None)
    if mode != "valid":
        for name in names:
            if draw(st.integers(0, 9)) < (5 if mode == "hostile" else 1):
                body[name] = draw(st.one_of(FIELD_VALUES.get(name, anything), anything))
    for _ in range(draw(st.integers(0, 2))):  # fields the schema does not know
        body[draw(st.text(min_size=1, max_size=12))] = draw(anything)
    return body


def _encode(draw, body: object) -> bytes:
    """Valid JSON mostly, else the ways a client (or an attacker) gets it wrong."""
    how = draw(st.sampled_from(["ascii"] * 6 + ["utf8", "cut", "junk"]))
    text = json.dumps(body, ensure_ascii=how != "utf8", allow_nan=True)
    raw = json.dumps(RAW)
    while raw in text:
        text = text.replace(raw, draw(raw_json), 1)
    data = text.encode("utf-8", "surrogatepass")  # lone surrogates become invalid UTF-8
    if how == "cut":
        data = data[: draw(st.integers(0, max(0, len(data) - 1)))]
    elif how == "junk":
        at = draw(st.integers(0, len(data)))
        data = data[:at] + draw(st.binary(min_size=1, max_size=8)) + data[at:]
    return data


# ----------------------------------------------------------------------------- checks
def _check(response: httpx.Response) -> None:
    STATS["sent"] += 1
    status = response.status_code
    if status >= 500:
        STATS["5xx"] += 1
    assert status < 500, f"{status}: {response.text[:500]}"
    kind = response.headers.get("content-type", "")
    if status != 200:
        STATS["4xx"] += 1
        assert kind.startswith("application/json"), kind
        error = response.json()["error"]
        REFUSALS[f"{status} {error['type']}"] += 1
        assert isinstance(error["message"], str) and error["message"]
        assert isinstance(error["type"], str)
        assert len(response.content) < 2048  # no echo of a huge input
        return
    STATS["ok"] += 1
    if kind.startswith("text/event-stream"):
        STATS["streams"] += 1
        events = [line for line in response.text.split("\n") if line]
        assert events and events[-1] == "data: [DONE]", events[-3:]
        for event in events[:-1]:
            assert event.startswith("data: {"), event
            json.loads(event.removeprefix("data: "))
        return
    assert kind.startswith("application/json"), kind
    assert response.json()["choices"][0]["finish_reason"] in ("stop", "length")


def _send(http: httpx.Client, route: str, data: bytes) -> None:
    response = http.post(route, content=data, headers={"content-type": "application/json"})
    _check(response)


@pytest.mark.parametrize("half", [1, 2])  # two tests of half the run each: none is long
@settings(
    max_examples=EXAMPLES // 2,
    deadline=None,
    database=None,
    suppress_health_check=list(HealthCheck),
)
@given(data=st.data())
def test_fuzz_generation_routes(
    http: httpx.Client, fields: dict[str, list[str]], half: int, data
) -> None:
    # One body, drawn from both routes' fields, sent to each route: half the drawing per
    # request, and every body also carries the other route's fields as extras.
    names = sorted(set(fields["/v1/completions"]) | set(fields["/v1/chat/completions"]))
    body = _encode(data.draw, _body(data.draw, names))
    for route in ROUTES:
        _send(http, route, body)


KNOWN_HOSTILE = [
    b'{"prompt": "x", "seed": 18446744073709551616, "stream": true}',
    b'{"prompt": "x", "temperature": 5e-324, "stream": true}',
    b'{"prompt": "\\ud800", "stream": true}',
    b'{"prompt": "x", "x": ' + b"[" * 1000 + b"]" * 1000 + b"}",
    b'{"prompt": "x", "x": ' + b"1" * 4301 + b"}",
    b'{"prompt": "x", "max_tokens": ' + b"1" * 4300 + b"}",
    b'{"messages": [{"role": "user", "content": "\\udfff"}], "stream": true}',
    b'{"prompt": "x", "stop": ["a", "b", "c", "d", "e"], "stream": true}',
    b'{"prompt": "x", "n": 2}',
    b'{"prompt": "x", "logprobs": 5}',
    b'{"prompt": "x", "stream": true, "stream_options": {"include_usage": true}}',
    b'{"prompt": [0, 1, 2147483647]}',
    b'{"prompt": "' + b"x" * 70_000 + b'"}',
]


@pytest.mark.parametrize("body", KNOWN_HOSTILE, ids=range(len(KNOWN_HOSTILE)))
@pytest.mark.parametrize("route", list(ROUTES))
def test_known_hostile_bodies(http: httpx.Client, route: str, body: bytes) -> None:
    _send(http, route, body)


def test_the_daemon_is_healthy_after_the_fuzz(
    fuzz_daemon: DaemonProcess,
    http: httpx.Client,
    request: pytest.FixtureRequest,
    capsys: pytest.CaptureFixture,
) -> None:
    seconds = time.monotonic() - STATS["started"]
    line = (
        f"fuzz: {STATS['sent']} requests, {STATS['5xx']} 5xx, {STATS['4xx']} 4xx, "
        f"{STATS['ok']} 200 ({STATS['streams']} streams) in {seconds:.1f}s; "
        f"refusals: {dict(REFUSALS.most_common())}"
    )
    with capsys.disabled():  # the figures, in every run's output
        print(f"\n{line}")
    request.node.user_properties.append(("fuzz", dict(STATS, seconds=round(seconds, 1))))
    assert fuzz_daemon.process.poll() is None
    assert httpx.get(fuzz_daemon.url + "/health", trust_env=False).json()["state"] == "ready"
    r = http.post("/v1/completions", json={"prompt": "def f():", "max_tokens": 2})
    assert r.status_code == 200 and r.json()["choices"][0]["finish_reason"] in ("stop", "length")
    metrics = http.get("/metrics")
    assert metrics.status_code == 200 and "ling_requests_total" in metrics.text
    assert STATS["5xx"] == 0
    assert STATS["sent"] >= 2000, line
