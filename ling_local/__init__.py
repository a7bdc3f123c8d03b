"""ling-local: one big code model, instant for one person.

The public surface is the SDK (`Client`, `AsyncClient`), profiles and the exception tree.
Imports are lazy so that `python -m training.train` or the CLI's `--help` stay light.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_EXPORTS = {
    "AsyncClient": "ling_local.client",
    "Client": "ling_local.client",
    "Profile": "ling_local.config",
    "list_profiles": "ling_local.config",
    "load_profile": "ling_local.config",
    **{
        name: "ling_local.errors"
        for name in (
            "APIStatusError",
            "AgentError",
            "AuthenticationError",
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
        )
    },
}

__all__ = sorted([*_EXPORTS, "__version__"])


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'ling_local' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


def __dir__() -> list[str]:
    return __all__
