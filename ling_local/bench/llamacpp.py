"""llama.cpp as the CPU baseline of `bench keystroke --baseline llama.cpp`: the profile's model
converted to GGUF (`gguf_export`) and run by llama-cpp-python (the `llamacpp` extra) on the
same token ids as our engine, with the same three measurements (`KeystrokeSide`)."""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np

from ling_local.errors import ConfigError

__all__ = ["LlamaCppSide", "llama_cpp_version"]


def llama_cpp_version() -> str:
    """The installed llama-cpp-python's version; a clear error when it is missing."""
    try:
        import llama_cpp
    except ImportError:
        raise ConfigError(
            "the llama.cpp baseline needs llama-cpp-python: pip install 'ling-local[llamacpp]' "
            "(it builds llama.cpp from source: a C++ compiler and cmake, a few minutes)"
        ) from None
    return llama_cpp.__version__


class LlamaCppSide:
    """One llama.cpp context (the methods are async only to match the engine's side) on a GGUF file with `threads` threads for prompts and decode.
    Tokens go in as ids (`Llama.eval`); the next token is the argmax of the last logits,
    read straight from llama.cpp's buffer."""

    def __init__(self, gguf_path: str, threads: int, n_ctx: int) -> None:
        import llama_cpp

        self.name = f"llama.cpp, {threads} thread{'s' if threads > 1 else ''}"
        self.llm = llama_cpp.Llama(
            model_path=str(gguf_path),
            n_ctx=n_ctx,
            n_batch=512,
            n_threads=threads,
            n_threads_batch=threads,
            verbose=False,
        )
        self.n_vocab = self.llm.n_vocab()

    def close(self) -> None:
        self.llm.close()

    def _clear(self) -> None:
        self.llm.reset()
        self.llm._ctx.kv_cache_clear()

    def _next(self) -> int:
        logits = np.ctypeslib.as_array(self.llm._ctx.get_logits(), shape=(self.n_vocab,))
        return int(logits.argmax())

    async def ttft_cold(self, prompt: Sequence[int]) -> float:
        self._clear()
        t0 = time.perf_counter()
        self.llm.eval(prompt)
        self._next()
        return time.perf_counter() - t0

    async def ttft_cached(self, prefix: Sequence[int], prompt: Sequence[int]) -> float:
        self._clear()
        self.llm.eval(prefix)
        t0 = time.perf_counter()
        self.llm.eval(prompt[len(prefix) :])
        self._next()
        return time.perf_counter() - t0

    async def decode(self, prompt: Sequence[int], new_tokens: int) -> tuple[float, list[int]]:
        """The mean gap between greedy tokens after the prompt, and the tokens."""
        self._clear()
        self.llm.eval(prompt)
        token = self._next()
        t0 = time.perf_counter()
        out = [token]
        for _ in range(new_tokens - 1):
            self.llm.eval([token])
            token = self._next()
            out.append(token)
        return (time.perf_counter() - t0) / max(1, new_tokens - 1), out
