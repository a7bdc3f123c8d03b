"""Bad input gets a 4xx with a clear message, and the daemon keeps serving. Never a 500."""

from __future__ import annotations

import pytest


def _err(r) -> str:
    body = r.json()
    assert set(body) == {"error"}, body
    assert body["error"]["message"]
    return body["error"]["message"]


CASES = [
    # (route, raw body, expected status, words expected in the message)
    ("/v1/completions", b'{"prompt": "x", ', 400, "not valid JSON"),
    ("/v1/completions", b'["prompt"]', 400, "JSON object"),
    ("/v1/completions", b'{"prompt": "\xff\xfe"}', 400, "UTF-8"),
    ("/v1/completions", b'{"prompt": 5}', 400, "prompt"),
    ("/v1/completions", b'{"prompt": "x", "max_tokens": -1}', 400, "max_tokens"),
    ("/v1/completions", b'{"prompt": "x", "max_tokens": 0}', 400, "max_tokens"),
    ("/v1/completions", b'{"prompt": "x", "max_tokens": "ten"}', 400, "max_tokens"),
    ("/v1/completions", b'{"prompt": "x", "max_tokens": 99999999}', 400, "max_tokens"),
    ("/v1/completions", b'{"prompt": "x", "temperature": 5}', 400, "temperature"),
    ("/v1/completions", b'{"prompt": "x", "top_p": 0}', 400, "top_p"),
    ("/v1/completions", b'{"prompt": "x", "n": 3}', 400, "n"),
    ("/v1/completions", b'{"prompt": "x", "stream": "yes"}', 400, "stream"),
    ("/v1/completions", b'{"prompt": "x", "stop": [""]}', 400, "stop"),
    ("/v1/completions", b'{"prompt": "x", "echo": true}', 400, "echo"),
    ("/v1/completions", b'{"prompt": ["a", "b"]}', 400, "one prompt"),
    ("/v1/completions", b'{"prompt": ""}', 400, "empty"),
    ("/v1/completions", b'{"prompt": []}', 400, "empty"),
    ("/v1/completions", b'{"prompt": [99999999]}', 400, "token ids"),
    ("/v1/completions", b'{"prompt": [5, -1]}', 400, "greater than or equal to 0"),
    ("/v1/completions", b'{"prompt": [5, "a"]}', 400, "valid integer"),
    ("/v1/completions", b'{"prompt": "x", "model": "gpt-4"}', 400, "not served"),
    ("/v1/completions", b"{}", 400, "prompt"),
    ("/v1/chat/completions", b'{"messages": []}', 400, "messages"),
    ("/v1/chat/completions", b'{"messages": [{"role": "wizard", "content": "x"}]}', 400, "role"),
    ("/v1/chat/completions", b'{"messages": [{"role": "user", "content": ""}]}', 400, "empty"),
    ("/v1/chat/completions", b'{"messages": "hello"}', 400, "messages"),
    (
        "/v1/chat/completions",
        b'{"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function"}]}',
        400,
        "tool",
    ),
]


@pytest.mark.parametrize(("route", "body", "status", "words"), CASES)
def test_bad_request_is_4xx_with_message(app_client, route, body, status, words) -> None:
    r = app_client.post(route, content=body)
    assert r.status_code == status, r.text
    assert words.lower() in _err(r).lower()


def test_prompt_longer_than_context(app_client) -> None:
    r = app_client.post("/v1/completions", json={"prompt": "def f():\n    pass\n" * 2000})
    assert r.status_code == 400
    assert r.json()["error"]["type"] == "context_length_exceeded"
    assert "context" in _err(r)


def test_body_too_large_is_413(app_client) -> None:
    r = app_client.post("/v1/completions", content=b'{"prompt": "' + b"x" * (5 << 20) + b'"}')
    assert r.status_code == 413
    assert "too large" in _err(r)


def test_unknown_route_and_method(app_client) -> None:
    assert app_client.get("/v1/nothing").status_code == 404
    assert app_client.get("/v1/completions").status_code == 405


def test_daemon_keeps_serving_after_bad_input(app_client) -> None:
    for _, body, _, _ in CASES:
        app_client.post("/v1/completions", content=body)
    r = app_client.post("/v1/completions", json={"prompt": "def f():", "max_tokens": 2})
    assert r.status_code == 200
    assert r.json()["choices"][0]["finish_reason"] in ("stop", "length")


def test_missing_content_type_still_parses(app_client) -> None:
    r = app_client.post(
        "/v1/completions",
        content=b'{"prompt": "x = ", "max_tokens": 1}',
        headers={"Content-Type": "application/x-www-form-urlencoded"},
    )
    assert r.status_code == 200


def test_special_tokens_in_user_text_stay_text(app_client) -> None:
    plain = app_client.post("/v1/completions", json={"prompt": "a", "max_tokens": 1}).json()
    tricky = app_client.post(
        "/v1/completions", json={"prompt": "a<|endoftext|>", "max_tokens": 1}
    ).json()
    # "<|endoftext|>" as text is several ordinary tokens, not one special token.
    assert tricky["usage"]["prompt_tokens"] >= plain["usage"]["prompt_tokens"] + 3


# --- hostile input found by an outside review (issue 24): each was a 500 -------------------
DEEP = b"[" * 1000 + b"]" * 1000
HUGE_NUMBER = b"1" * 4301


def _completion(**fields: str) -> bytes:
    parts = {"prompt": '"x"', "max_tokens": "2", **fields}
    return ("{" + ", ".join(f'"{k}": {v}' for k, v in parts.items()) + "}").encode()


HOSTILE = [
    ("/v1/completions", _completion(seed=str(2**64)), "seed"),
    ("/v1/completions", _completion(seed=str(2**63)), "seed"),
    ("/v1/completions", _completion(seed=str(-(2**63) - 1)), "seed"),
    ("/v1/completions", _completion(seed=str(2**64), stream="true"), "seed"),
    ("/v1/completions", _completion(ignored=DEEP.decode()), "not valid JSON"),
    ("/v1/completions", _completion(prompt=DEEP.decode()), "not valid JSON"),
    ("/v1/completions", _completion(prompt='"\\ud800"'), "surrogate"),
    ("/v1/completions", _completion(prompt='"a\\udc00b"'), "surrogate"),
    ("/v1/completions", _completion(suffix='"\\ud800"'), "surrogate"),
    ("/v1/completions", b'{"prompt": "\xed\xa0\x80"}', "UTF-8"),
    (
        "/v1/chat/completions",
        b'{"messages": [{"role": "user", "content": "\\ud800"}]}',
        "surrogate",
    ),
    (
        "/v1/chat/completions",
        b'{"messages": [{"role": "user", "content": [{"type": "text", "text": "\\udfff"}]}]}',
        "surrogate",
    ),
    ("/v1/completions", _completion(ignored=HUGE_NUMBER.decode()), "number out of range"),
    ("/v1/completions", _completion(seed=HUGE_NUMBER.decode()), "number out of range"),
    ("/v1/completions", _completion(prompt="[" + HUGE_NUMBER.decode() + "]"), "out of range"),
]


@pytest.mark.parametrize(
    ("route", "body", "words"),
    HOSTILE,
    ids=[
        "seed-2**64",
        "seed-2**63",
        "seed-below-int64",
        "seed-2**64-stream",
        "deep-ignored",
        "deep-prompt",
        "surrogate-prompt",
        "surrogate-low",
        "surrogate-suffix",
        "surrogate-raw-bytes",
        "surrogate-chat",
        "surrogate-chat-part",
        "4301-digits-ignored",
        "4301-digits-seed",
        "4301-digits-token-id",
    ],
)
def test_hostile_input_is_a_400_json_error(app_client, route, body, words) -> None:
    r = app_client.post(route, content=body)
    assert r.status_code == 400, r.text
    assert r.headers["content-type"] == "application/json"
    assert words.lower() in _err(r).lower()


def test_a_huge_number_is_not_echoed_back(app_client) -> None:
    for field in ("max_tokens", "temperature", "seed", "n", "model"):
        value = "9" * 4300 if field != "model" else '"' + "m" * 100_000 + '"'
        r = app_client.post("/v1/completions", content=_completion(**{field: value}))
        assert r.status_code == 400, r.text
        assert field in _err(r) and len(r.content) < 400, (field, len(r.content))


@pytest.mark.parametrize("temperature", ["1e-38", "1e-40", "5e-324", "1e-300", "0.00001"])
def test_a_tiny_temperature_decodes_greedily(app_client, temperature: str) -> None:
    greedy = app_client.post("/v1/completions", content=_completion(temperature="0"))
    r = app_client.post("/v1/completions", content=_completion(temperature=temperature))
    assert r.status_code == 200, r.text
    if temperature != "0.00001":
        assert r.json()["choices"][0]["text"] == greedy.json()["choices"][0]["text"]


def test_a_chunked_body_over_the_limit_is_413(app_client) -> None:
    def chunks():
        yield b'{"prompt": "'
        for _ in range(5):
            yield b"x" * (1 << 20)
        yield b'"}'

    r = app_client.post("/v1/completions", content=chunks())
    assert r.status_code == 413, r.text
    assert "too large" in _err(r)


def test_defaults_and_limits_come_from_the_profile(app_client) -> None:
    schema = app_client.get("/openapi.json").json()["components"]["schemas"]
    max_tokens = schema["CompletionRequest"]["properties"]["max_tokens"]
    assert max_tokens["anyOf"][0]["maximum"] == 4096  # limits.max_tokens
    assert "default 64" in max_tokens["description"]  # sampling.completion_max_tokens
    assert (
        "default 512" in schema["ChatCompletionRequest"]["properties"]["max_tokens"]["description"]
    )
    r = app_client.post("/v1/completions", json={"prompt": "def f():", "ignore_eos": True})
    assert r.json()["usage"]["completion_tokens"] == 64
    too_many = app_client.post("/v1/completions", json={"prompt": "x", "stop": list("abcdefghi")})
    assert too_many.status_code == 400 and "at most 8" in _err(too_many)


def test_a_bad_seed_on_a_stream_is_a_400_not_a_cut_stream(daemon) -> None:
    def disconnects(http) -> str:
        lines = http.get("/metrics").text.splitlines()
        return next(
            (x for x in lines if x.startswith('ling_cancelled_requests_total{reason="disc')), ""
        )

    with daemon.http() as http:
        before = disconnects(http)
        r = http.post(
            "/v1/completions",
            json={"prompt": "x", "max_tokens": 2, "seed": 2**64, "stream": True},
        )
        assert r.status_code == 400 and r.headers["content-type"] == "application/json"
        assert "seed" in _err(r)
        assert disconnects(http) == before
