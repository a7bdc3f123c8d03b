"""The two kinds of step: a prompt for the model, and a plain Python function.

Prompts are Jinja2 templates (``{{ plan }}``, ``{{ review.score }}``) filled from the run's
inputs and the outputs of earlier steps; JSON-like values (dicts, lists, pydantic objects)
render as JSON. A function step's parameters are filled by name the same way, so
``def run_tests(fix: str) -> str`` receives the output of the step named ``fix``.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import json
import keyword
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import jinja2
import jinja2.meta

from ling_local.agents.events import jsonable
from ling_local.agents.structured import Schema
from ling_local.errors import ChainDefinitionError

__all__ = ["Function", "Prompt", "Step", "step"]

CHAT_REASK = (
    "That answer was rejected: {{ error }}\n"
    "Answer again with JSON only, matching the schema exactly."
)
COMPLETE_REASK = (
    "{{ prompt }}{{ prefill }}{{ output }}\n# ^ rejected: {{ error | replace('\\n', ' ') }}\n"
)


def _finalize(value: Any) -> Any:
    if isinstance(value, dict | list) or hasattr(value, "model_dump"):
        return json.dumps(value, default=jsonable, ensure_ascii=False)
    return value


_ENV = jinja2.Environment(
    undefined=jinja2.StrictUndefined,
    keep_trailing_newline=True,
    autoescape=False,
    finalize=_finalize,
)


def _compile(step: str, what: str, source: str) -> tuple[jinja2.Template, frozenset[str]]:
    try:
        names = frozenset(jinja2.meta.find_undeclared_variables(_ENV.parse(source)))
        return _ENV.from_string(source), names
    except jinja2.TemplateSyntaxError as err:
        raise ChainDefinitionError(
            f"step {step!r}: the {what} template is invalid: {err.message} (line {err.lineno})"
        ) from None


def _check_name(name: str) -> None:
    if not isinstance(name, str) or not name.isidentifier() or keyword.iskeyword(name):
        raise ChainDefinitionError(
            f"step name {name!r} must be a Python identifier (templates refer to it by name)"
        )


def _render(step: str, template: jinja2.Template, context: Mapping[str, Any]) -> str:
    try:
        return template.render(context)
    except jinja2.UndefinedError as err:
        raise ChainDefinitionError(f"step {step!r}: {err.message}") from None


@dataclass
class Prompt:
    """A model call. Its output is the answer's text, or the validated value of `schema`."""

    name: str
    template: str
    """The user message (chat) or the whole prompt (complete), as a Jinja2 template."""
    system: str | None = None
    """A system message template (chat mode)."""
    mode: Literal["chat", "complete"] = "chat"
    """'chat' for chat models; 'complete' sends the template as a raw prompt, which is what
    a code model such as the embedded tiny one continues best."""
    schema: Any = None
    """A pydantic model (or type) or a JSON-schema dict: the output is parsed and validated."""
    prefill: str = ""
    """The start of the answer, put at the end of the prompt (complete mode): e.g.
    ``def `` makes a code model write a function. Not with `schema`: the daemon constrains
    the whole answer to the schema, from its first token."""
    max_tokens: int = 256
    temperature: float | None = None
    """None: the daemon's default."""
    stop: Sequence[str] = ()
    timeout: float | None = None
    """Seconds for the whole step, re-asks included; the generation is cancelled at the end."""
    max_reasks: int = 2
    """How many times a schema step is asked again after an invalid answer."""
    reask: str | None = None
    """Template for a re-ask (variables: prompt, prefill, output, error)."""
    options: dict[str, Any] = field(default_factory=dict)
    """Other request fields: seed, top_p, ignore_eos, ..."""

    kind = "prompt"

    def __post_init__(self) -> None:
        _check_name(self.name)
        if self.mode not in ("chat", "complete"):
            raise ChainDefinitionError(f"step {self.name!r}: mode must be 'chat' or 'complete'")
        if self.max_tokens < 1 or self.max_reasks < 0:
            raise ChainDefinitionError(
                f"step {self.name!r}: max_tokens must be >= 1 and max_reasks >= 0"
            )
        if self.timeout is not None and self.timeout <= 0:
            raise ChainDefinitionError(f"step {self.name!r}: timeout must be positive")
        if self.prefill and self.mode == "chat":
            raise ChainDefinitionError(
                f"step {self.name!r}: prefill needs mode='complete' (a chat answer cannot be "
                "started for the model)"
            )
        if self.prefill and self.schema is not None:
            raise ChainDefinitionError(
                f"step {self.name!r}: prefill cannot be combined with schema (the engine "
                "constrains the whole answer to the schema; end the prompt where the value "
                "starts instead)"
            )
        self._template, names = _compile(self.name, "prompt", self.template)
        self._system = None
        if self.system is not None:
            self._system, more = _compile(self.name, "system", self.system)
            names |= more
        default = CHAT_REASK if self.mode == "chat" else COMPLETE_REASK
        self._reask, _ = _compile(self.name, "reask", self.reask or default)
        self.variables: frozenset[str] = names
        try:
            self._schema = None if self.schema is None else Schema.of(self.schema)
        except Exception as err:  # pydantic / jsonschema say what is wrong with it
            raise ChainDefinitionError(f"step {self.name!r}: invalid schema: {err}") from None

    @property
    def structured(self) -> Schema | None:
        return self._schema

    def render(self, context: Mapping[str, Any]) -> tuple[str, str | None]:
        """(prompt or user message, system message)."""
        system = None if self._system is None else _render(self.name, self._system, context)
        return _render(self.name, self._template, context), system

    def render_reask(self, prompt: str, output: str, error: str) -> str:
        return self._reask.render(prompt=prompt, prefill=self.prefill, output=output, error=error)

    def restore(self, saved: Any) -> Any:
        """A saved output as the step produced it (typed again for schema steps)."""
        return saved if self._schema is None else self._schema.validate(saved)

    def dump(self, output: Any) -> Any:
        return output if self._schema is None else self._schema.dump(output)


@dataclass
class Function:
    """A local step: `fn` is called with the inputs and earlier outputs its parameters name
    (all of them when it takes ``**kwargs``). Sync functions run in a worker thread."""

    name: str
    fn: Callable[..., Any]
    timeout: float | None = None

    kind = "function"

    def __post_init__(self) -> None:
        _check_name(self.name)
        if not callable(self.fn):
            raise ChainDefinitionError(f"step {self.name!r}: {self.fn!r} is not callable")
        params = inspect.signature(self.fn).parameters.values()
        self._takes_all = any(p.kind is p.VAR_KEYWORD for p in params)
        self._required = frozenset(
            p.name
            for p in params
            if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.default is p.empty
        )
        self._optional = frozenset(
            p.name
            for p in params
            if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.default is not p.empty
        )
        self.variables: frozenset[str] = self._required
        if any(p.kind is p.POSITIONAL_ONLY for p in params):
            raise ChainDefinitionError(
                f"step {self.name!r}: parameters are filled by name; positional-only ones cannot be"
            )

    async def call(self, context: Mapping[str, Any]) -> Any:
        if self._takes_all:
            kwargs = dict(context)
        else:
            wanted = self._required | self._optional
            kwargs = {k: v for k, v in context.items() if k in wanted}
        if inspect.iscoroutinefunction(self.fn):
            return await self.fn(**kwargs)
        result = await asyncio.to_thread(functools.partial(self.fn, **kwargs))
        if inspect.isawaitable(result):
            result = await result
        return result

    def restore(self, saved: Any) -> Any:
        return saved

    def dump(self, output: Any) -> Any:
        return output


Step = Prompt | Function


def step(
    fn: Callable[..., Any] | None = None, *, name: str | None = None, timeout: float | None = None
) -> Any:
    """Decorator: make a function a chain step (``@step`` or ``@step(timeout=60)``)."""

    def wrap(f: Callable[..., Any]) -> Function:
        return Function(name or f.__name__, f, timeout)

    return wrap(fn) if fn is not None else wrap
