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
