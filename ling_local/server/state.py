"""Everything a request handler needs, built once per daemon."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from ling_local.config import Profile
from ling_local.engines.base import Engine, EngineState, GenerationRequest, Priority, SamplingParams
from ling_local.errors import ContextLengthExceeded, EngineNotReady, RequestError
from ling_local.metrics import Metrics
from ling_local.prompts import BuiltPrompt, PromptBuilder
from ling_local.scheduler import Scheduler
from ling_local.server.schemas import (
    ChatCompletionRequest,
    CompletionRequest,
    RequestModels,
    request_models,
)

__all__ = ["DaemonState"]


@dataclass(eq=False)
class DaemonState:
    profile: Profile
    engine: Engine
    metrics: Metrics
    scheduler: Scheduler
    prompts: PromptBuilder | None = None
    started: float = field(default_factory=time.time)
    requests: RequestModels = field(init=False)
    """The request bodies with this profile's limits and defaults bound in."""

    def __post_init__(self) -> None:
        self.requests = request_models(self.profile)

    @property
    def model_name(self) -> str:
        return self.profile.served_model_name

    def ready_prompts(self) -> PromptBuilder:
        """The prompt builder, once the engine (and so its tokenizer) is up."""
        health = self.engine.health()
        state = health.state
        if state is not EngineState.READY:
            detail = health.detail
            raise EngineNotReady(f"the engine is {state.value}" + (f": {detail}" if detail else ""))
        if self.prompts is None:
            tokenizer = getattr(self.engine, "tokenizer", None)
            heal = getattr(self.engine, "supports_token_healing", False)
            self.prompts = PromptBuilder(self.profile.prompt, tokenizer, heal=heal)
        return self.prompts

    def check_model(self, requested: str | None) -> None:
        if requested and requested != self.model_name:
            shown = requested if len(requested) <= 80 else requested[:77] + "..."
            raise RequestError(
                f"model {shown!r} is not served here; this daemon serves "
                f"{self.model_name!r} (see /v1/models)",
                param="model",
            )

    @staticmethod
    def sampling(
        body: CompletionRequest | ChatCompletionRequest, built: BuiltPrompt
    ) -> SamplingParams:
        """The engine's sampling parameters from a validated body (limits and defaults
        were applied by its schema)."""
        assert body.max_tokens is not None and body.temperature is not None
        assert body.top_p is not None
        # ignore_eos (benchmarks) means exactly max_tokens tokens: the prompt format's own
        # end markers go too; only stop strings the request itself gives still apply.
        implicit_stop = () if body.ignore_eos else built.stop
        return SamplingParams(
            max_tokens=body.max_tokens,
            temperature=body.temperature,
            top_p=body.top_p,
            seed=body.seed,
            stop=tuple(dict.fromkeys([*body.stop_list(), *implicit_stop])),
            stop_token_ids=() if body.ignore_eos else built.stop_token_ids,
            ignore_eos=body.ignore_eos,
            scope=None if body.ignore_eos else built.scope,
        )

    def check_context(self, built: BuiltPrompt) -> None:
        """The prompt fits the model's context (checked here once; engines trust it)."""
        if built.ids is None:
            return
        n = len(built.ids)
        if n == 0:
            raise RequestError("the prompt is empty", param="prompt")
        limit = self.engine.context_length
        if n >= limit:
            raise ContextLengthExceeded(
                f"the prompt has {n} tokens but this model's context is {limit} tokens; "
                "shorten the prompt",
                param="prompt",
            )

    def check_json_schema(self, schema: dict, *, fim: bool = False) -> None:
        """A `response_format` schema the engine can constrain decoding with, or a 400 now
        (before a streamed response has started)."""
        import jsonschema

        if fim:
            raise RequestError(
                "response_format cannot be combined with suffix (fill-in-the-middle)",
                param="response_format",
            )
        try:
            jsonschema.validators.validator_for(schema).check_schema(schema)
        except jsonschema.SchemaError as err:
            raise RequestError(
                f"response_format: the JSON schema is invalid: {err.message}",
                param="response_format",
            ) from None
        check = getattr(self.engine, "check_json_schema", None)
        if check is not None:  # engines that compile the grammar here (embedded)
            check(schema)

    def request(
        self,
        built: BuiltPrompt,
        sampling: SamplingParams,
        priority: str | None,
        default: Priority,
        json_schema: dict | None = None,
        *,
        messages: list[dict[str, str]] | None = None,
        fim: tuple[str, str] | None = None,
    ) -> GenerationRequest:
        self.check_context(built)
        if json_schema is not None:
            self.check_json_schema(json_schema, fim=fim is not None)
        return GenerationRequest(
            prompt=built.text,
            prompt_ids=built.ids,
            sampling=sampling,
            priority=Priority.parse(priority) if priority else default,
            json_schema=json_schema,
            messages=messages,
            fim=fim,
            first_token_ids=built.first_token_ids,
            heal_text=built.heal_text,
        )
