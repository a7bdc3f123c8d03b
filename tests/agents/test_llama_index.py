"""llama-index's OpenAILike, as `ling_llm()` builds it, against the real daemon."""

from __future__ import annotations

import sys

import httpx
import pytest

from ling_local.errors import ConfigError
from ling_local.integrations.llama_index import ling_llm
from tests.agents.conftest import agent_requests
from tests.support import DaemonProcess

pytest.importorskip("llama_index.llms.openai_like")

from llama_index.core.llms import ChatMessage
from llama_index.core.workflow import (
    Context,
    Event,
    StartEvent,
    StopEvent,
    Workflow,
    step,
)


@pytest.fixture
def llm(daemon: DaemonProcess, monkeypatch: pytest.MonkeyPatch):
    # discovered like the SDK does it: from the environment (or the daemon's files)
    monkeypatch.setenv("LING_LOCAL_URL", daemon.url)
    monkeypatch.setenv("LING_LOCAL_TOKEN", daemon.token)
    with httpx.Client() as http:  # our own, so the test closes its sockets
        yield ling_llm(max_tokens=6, http_client=http)


def test_metadata_comes_from_the_daemon(llm, daemon: DaemonProcess) -> None:
    with daemon.client() as client:
        model = client.models()[0]
    meta = llm.metadata
    assert meta.model_name == model.id
    assert meta.context_window == model.context_length
    assert meta.is_chat_model is True
    assert llm.api_base == f"{daemon.url}/v1"


def test_complete_chat_and_stream_chat(llm, daemon: DaemonProcess) -> None:
    before = agent_requests(daemon)
    completion = llm.complete("def add(a, b):")
    assert isinstance(completion.text, str)
    assert completion.raw.usage.completion_tokens <= 6

    messages = [ChatMessage(role="user", content="Write a haiku about tests.")]
    reply = llm.chat(messages)
    assert reply.message.role == "assistant"
    assert reply.raw.usage.completion_tokens <= 6

    chunks = list(llm.stream_chat(messages))
    assert chunks
    assert "".join(c.delta or "" for c in chunks) == chunks[-1].message.content
    assert agent_requests(daemon) - before == 3  # scheduled behind keystrokes and chat


class Drafted(Event):
    draft: str


class ReviewFlow(Workflow):
    def __init__(self, llm, **kw) -> None:
        super().__init__(**kw)
        self.llm = llm

    @step
    async def draft(self, ctx: Context, ev: StartEvent) -> Drafted:
        return Drafted(draft=(await self.llm.acomplete(ev.task)).text)

    @step
    async def review(self, ev: Drafted) -> StopEvent:
        reply = await self.llm.achat(
            [ChatMessage(role="user", content=f"Review this:\n{ev.draft}")]
        )
        return StopEvent(result={"draft": ev.draft, "review": reply.message.content})


async def test_llm_in_a_workflow(daemon: DaemonProcess) -> None:
    before = agent_requests(daemon)
    async with httpx.AsyncClient() as http:
        llm = ling_llm(daemon.url, daemon.token, max_tokens=6, async_http_client=http)
        result = await ReviewFlow(llm, timeout=120).run(task="def parse(s):")
    assert set(result) == {"draft", "review"}
    assert agent_requests(daemon) - before == 2


def test_missing_extra_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "llama_index.llms.openai_like", None)
    with pytest.raises(ConfigError, match=r"pip install 'ling-local\[llama-index\]'"):
        ling_llm()
