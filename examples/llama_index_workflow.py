"""A llama-index workflow on the local daemon: draft a function, then review the draft.

    pip install 'ling-local[llama-index]'
    python examples/llama_index_workflow.py "a function that merges two sorted lists"

`ling_llm()` returns llama-index's own ``OpenAILike`` pointed at the running daemon (URL,
token, model name and context window discovered), so anything in llama-index that takes an
LLM — workflows, agents, query engines — runs on the local model.
"""

from __future__ import annotations

import argparse
import asyncio

import httpx
from llama_index.core.llms import ChatMessage
from llama_index.core.workflow import Context, Event, StartEvent, StopEvent, Workflow, step

from ling_local.integrations.llama_index import ling_llm


class Drafted(Event):
    code: str


class DraftAndReview(Workflow):
    def __init__(self, llm, **kwargs) -> None:
        super().__init__(**kwargs)
        self.llm = llm

    @step
    async def draft(self, ctx: Context, ev: StartEvent) -> Drafted:
        # a completion: the code model continues the function from its docstring
        prompt = f'def solution(*args):\n    """{ev.task}."""\n'
        return Drafted(code=prompt + (await self.llm.acomplete(prompt)).text)

    @step
    async def review(self, ev: Drafted) -> StopEvent:
        chunks = []
        question = [ChatMessage(role="user", content=f"Review this code:\n\n{ev.code}")]
        async for part in await self.llm.astream_chat(question):  # tokens as they come
            chunks.append(part.delta or "")
        return StopEvent(result={"code": ev.code, "review": "".join(chunks)})


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("task", nargs="?", default="a function that merges two sorted lists")
    parser.add_argument("--max-tokens", type=int, default=200)
    args = parser.parse_args()
    async with httpx.AsyncClient(timeout=600) as http:  # closed when the workflow is done
        llm = ling_llm(max_tokens=args.max_tokens, async_http_client=http)
        print(f"model {llm.metadata.model_name}, context {llm.metadata.context_window} tokens")
        result = await DraftAndReview(llm, timeout=600).run(task=args.task)
    print("── draft\n" + result["code"])
    print("── review\n" + result["review"])


if __name__ == "__main__":
    asyncio.run(main())
