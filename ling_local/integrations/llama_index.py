"""The running daemon as a llama-index LLM: ``llm = ling_llm()``.

It returns llama-index's own ``OpenAILike`` (``pip install 'ling-local[llama-index]'``),
pointed at the daemon that ``ling-local serve`` started — URL and token are discovered the
way the SDK finds them — and described from ``/v1/models``: model name, context window,
``is_chat_model=True`` (so ``complete`` goes through the chat template too). It works in
``chat``, ``stream_chat``, ``complete``, their async forms, and in workflows and agents.

    from ling_local.integrations.llama_index import ling_llm
    llm = ling_llm(max_tokens=256)
    print(llm.complete("def quicksort(xs):"))
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import httpx

from ling_local import discovery
from ling_local.client import Client
from ling_local.errors import ConfigError

if TYPE_CHECKING:
    from llama_index.llms.openai_like import OpenAILike

__all__ = ["ling_llm"]

_EXTRA_HINT = (
    "the llama-index integration needs the llama-index extra: pip install 'ling-local[llama-index]'"
)


def ling_llm(
    base_url: str | None = None,
    token: str | None = None,
    *,
    temperature: float = 0.0,
    max_tokens: int | None = None,
    priority: str = "agent",
    timeout: float = 600.0,
    max_retries: int = 2,
    **kwargs: Any,
) -> OpenAILike:
    """A ready ``OpenAILike`` for the daemon. `priority` is the daemon's scheduling class
    ('agent' by default, so scripts never delay the editor's completions; 'chat' for an
    interactive app). Other keyword arguments go to ``OpenAILike``."""
    try:
        from llama_index.llms.openai_like import OpenAILike
    except ImportError as err:
        raise ConfigError(f"{_EXTRA_HINT} ({err})") from None

    with Client(base_url, token) as client:
        model = client.models()[0]
        api_key, http_base = client.token, client.base_url
    url = base_url or discovery.daemon_url() or ""
    clients: dict[str, Any] = {}
    if url.startswith("unix:"):  # a daemon on a unix socket: route openai's httpx through it
        socket = url.removeprefix("unix:")
        clients = {
            "http_client": httpx.Client(transport=httpx.HTTPTransport(uds=socket)),
            "async_http_client": httpx.AsyncClient(transport=httpx.AsyncHTTPTransport(uds=socket)),
        }
    extra = dict(kwargs.pop("additional_kwargs", None) or {})
    extra_body = {"priority": priority, **(extra.pop("extra_body", None) or {})}
    return OpenAILike(
        model=model.id,
        api_base=f"{http_base}/v1",
        api_key=api_key or "no-token",
        is_chat_model=True,
        is_function_calling_model=False,
        context_window=model.context_length or 4096,
        temperature=temperature,
        max_tokens=max_tokens,
        timeout=timeout,
        max_retries=max_retries,
        additional_kwargs={**extra, "extra_body": extra_body},
        **clients,
        **kwargs,
    )
