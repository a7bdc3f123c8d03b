"""One exception tree for the whole project; every message is safe to show a user.

LingLocalError
├── ConfigError                 a profile or setting is invalid (names the field)
├── EngineError                 the model engine cannot serve
│   ├── EngineNotReady          still starting, or stopped
│   └── EngineCrashed           the engine died while serving a request
├── RequestError                the request itself is wrong (HTTP 400)
│   ├── ContextLengthExceeded   the prompt does not fit the model's context
│   └── BodyTooLarge            the request body is over the daemon's limit (HTTP 413)
├── GenerationCancelled         the generation was cancelled or superseded
├── Overloaded                  too many requests waiting (HTTP 429)
├── AgentError                  a chain (ling_local.agents) could not run to its end
│   ├── ChainDefinitionError    the chain or its file is invalid (names the step)
│   ├── RunNotFound             no run with that id in the run log
│   ├── ChainCancelled          the run was cancelled (it can be resumed)
│   └── StepFailed              one step failed (`.step` names it)
│       ├── StepTimeout         the step ran past its timeout
│       └── StructuredOutputError  the answer never matched the schema, even after re-asks
└── ClientError                 raised by the SDK (ling_local.client)
    ├── DaemonUnavailable       no daemon found or it cannot be reached
    └── APIStatusError          the daemon answered with an error status
        ├── AuthenticationError 401: missing or wrong token
        └── PermissionDenied    403: Host or Origin not allowed
"""

from __future__ import annotations

__all__ = [
    "APIStatusError",
    "AgentError",
    "AuthenticationError",
    "BodyTooLarge",
    "ChainCancelled",
    "ChainDefinitionError",
    "ClientError",
    "ConfigError",
    "ContextLengthExceeded",
    "DaemonUnavailable",
    "EngineCrashed",
    "EngineError",
    "EngineNotReady",
    "GenerationCancelled",
    "LingLocalError",
    "Overloaded",
    "PermissionDenied",
    "RequestError",
    "RunNotFound",
    "StepFailed",
    "StepTimeout",
    "StructuredOutputError",
]


class LingLocalError(Exception):
    """Base of every error ling-local raises on purpose."""

    #: OpenAI-style error type used when the error crosses HTTP.
    error_type: str = "server_error"
    #: HTTP status the daemon answers with.
    status_code: int = 500

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class ConfigError(LingLocalError):
    error_type = "config_error"


class EngineError(LingLocalError):
    error_type = "engine_error"
    status_code = 503


class EngineNotReady(EngineError):
    error_type = "engine_not_ready"


class EngineCrashed(EngineError):
    error_type = "engine_crashed"


class RequestError(LingLocalError):
    error_type = "invalid_request_error"
    status_code = 400

    def __init__(self, message: str, *, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


class ContextLengthExceeded(RequestError):
    error_type = "context_length_exceeded"


class BodyTooLarge(RequestError):
    status_code = 413


class GenerationCancelled(LingLocalError):
    error_type = "cancelled"
    status_code = 409


class Overloaded(LingLocalError):
    error_type = "overloaded"
    status_code = 429


class AgentError(LingLocalError):
    error_type = "agent_error"


class ChainDefinitionError(AgentError):
    error_type = "chain_definition_error"


class RunNotFound(AgentError):
    error_type = "run_not_found"


class ChainCancelled(AgentError):
    error_type = "cancelled"


class StepFailed(AgentError):
    error_type = "step_failed"

    def __init__(self, message: str, *, step: str = "", index: int = -1) -> None:
        super().__init__(message)
        self.step = step
        self.index = index


class StepTimeout(StepFailed):
    error_type = "step_timeout"


class StructuredOutputError(StepFailed):
    """`.attempts` answers were asked for; `.errors` says why each was rejected and
    `.output` is the last raw answer."""

    error_type = "structured_output_error"

    def __init__(
        self,
        message: str,
        *,
        step: str = "",
        index: int = -1,
        attempts: int = 0,
        errors: list[str] | None = None,
        output: str = "",
    ) -> None:
        super().__init__(message, step=step, index=index)
        self.attempts = attempts
        self.errors = list(errors or [])
        self.output = output


class ClientError(LingLocalError):
    error_type = "client_error"


class DaemonUnavailable(ClientError):
    error_type = "daemon_unavailable"


class APIStatusError(ClientError):
    def __init__(self, message: str, *, status_code: int, error_type: str = "error") -> None:
        super().__init__(message)
        self.status_code = status_code
        self.error_type = error_type


class AuthenticationError(APIStatusError):
    pass


class PermissionDenied(APIStatusError):
    pass
