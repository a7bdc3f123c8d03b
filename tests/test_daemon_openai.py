"""The daemon driven by the official `openai` client over real loopback TCP."""

from __future__ import annotations

import openai
import pytest

from tests.support import DaemonProcess


@pytest.fixture
def oai(daemon: DaemonProcess) -> openai.OpenAI:
    client = openai.OpenAI(base_url=daemon.url + "/v1", api_key=daemon.token, max_retries=0)
    yield client
    client.close()


def test_models_lists_the_served_model(oai: openai.OpenAI) -> None:
    models = oai.models.list().data
    assert [m.id for m in models] == ["test"]


def test_completion_non_streamed_reports_usage(oai: openai.OpenAI) -> None:
    out = oai.completions.create(
        model="test", prompt="def add(a, b):\n", max_tokens=8, temperature=0
    )
    choice = out.choices[0]
    assert choice.finish_reason in ("stop", "length")
    assert out.usage.completion_tokens <= 8
    assert out.usage.prompt_tokens > 0
    assert out.usage.total_tokens == out.usage.prompt_tokens + out.usage.completion_tokens
    if choice.finish_reason == "length":
        assert out.usage.completion_tokens == 8


def test_completion_streamed_matches_non_streamed(oai: openai.OpenAI) -> None:
    prompt = "class Stack:\n    def __init__(self):\n"
    whole = oai.completions.create(model="test", prompt=prompt, max_tokens=12, temperature=0)
    parts, usage, finish = [], None, None
    for chunk in oai.completions.create(
        model="test",
        prompt=prompt,
        max_tokens=12,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
    ):
        if chunk.choices:
            parts.append(chunk.choices[0].text)
            finish = chunk.choices[0].finish_reason or finish
        if chunk.usage:
            usage = chunk.usage
    assert "".join(parts) == whole.choices[0].text
    assert finish == whole.choices[0].finish_reason
    assert usage is not None and usage.completion_tokens == whole.usage.completion_tokens


def test_suffix_makes_a_fill_in_the_middle_prompt(oai: openai.OpenAI) -> None:
    plain = oai.completions.create(model="test", prompt="x = 1\n", max_tokens=4, temperature=0)
    fim = oai.completions.create(
        model="test", prompt="x = 1\n", suffix="\nprint(x)\n", max_tokens=4, temperature=0
    )
    # FIM wraps the prompt in three special tokens around prefix and suffix.
    assert fim.usage.prompt_tokens >= plain.usage.prompt_tokens + 3


def test_chat_streamed_and_not(oai: openai.OpenAI) -> None:
    messages = [
        {"role": "system", "content": "You write Python."},
        {"role": "user", "content": "Write a function that adds two numbers."},
    ]
    whole = oai.chat.completions.create(
        model="test", messages=messages, max_tokens=10, temperature=0
    )
    assert whole.choices[0].message.role == "assistant"
    assert whole.usage.completion_tokens <= 10
    stream = oai.chat.completions.create(
        model="test", messages=messages, max_tokens=10, temperature=0, stream=True
    )
    text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    assert text == whole.choices[0].message.content


def test_seeded_sampling_is_reproducible(oai: openai.OpenAI) -> None:
    kw = dict(model="test", prompt="import os\n", max_tokens=10, temperature=1.0, seed=7)
    a = oai.completions.create(**kw).choices[0].text
    b = oai.completions.create(**kw).choices[0].text
    assert a == b


def test_stop_string_ends_the_text_before_it(oai: openai.OpenAI) -> None:
    prompt = "def f():\n    return 1\n"
    free = (
        oai.completions.create(model="test", prompt=prompt, max_tokens=24, temperature=0)
        .choices[0]
        .text
    )
    if len(free) < 3:
        pytest.skip("the model stopped at once; nothing to cut")
    stop = free[1:3]
    out = oai.completions.create(
        model="test", prompt=prompt, max_tokens=24, temperature=0, stop=[stop]
    )
    assert out.choices[0].finish_reason == "stop"
    assert out.choices[0].text == free[: free.index(stop)]
