"""User settings of the language server, from `initializationOptions` and
`workspace/didChangeConfiguration`.

Editors send JSON in camelCase (`debounceMs`) and often nest it under the server's name
(`{"ling-local": {...}}`); both are accepted. A bad value is reported by name and the
previous settings stay in force, so a typo in an editor config never kills completion.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from pydantic.alias_generators import to_camel

from ling_local.errors import ConfigError

__all__ = ["ContextSources", "LspSettings", "merge_settings"]

_SECTION_NAMES = ("ling-local", "ling_local", "lingLocal", "ling")


class _Model(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="ignore", frozen=True
    )


class ContextSources(_Model):
    open_documents: bool = True
    """Snippets from the other open documents, ranked by Jaccard similarity."""
    workspace: bool = True
    """BM25 retrieval over the workspace's files (indexed in the background)."""


class LspSettings(_Model):
    enable: bool = True
    """Answer inline-completion requests at all (a quick off switch)."""
    debounce_ms: int = Field(default=120, ge=0, le=2000)
    """Typical wait after the last keystroke before asking the model; the actual wait adapts
    to the user's typing speed within [debounce_min_ms, debounce_max_ms]."""
    debounce_min_ms: int = Field(default=40, ge=0, le=2000)
    debounce_max_ms: int = Field(default=150, ge=0, le=5000)
    """Why 150 and not 350: on the tiny CPU model `bench complete` showed twice the
    suggestions (432 vs 229), answers from the model at 198 ms p50 instead of 339 ms, and a
    smaller share of generated tokens never shown (48 % vs 58 %): README, Editor."""
    max_lines: int = Field(default=8, ge=1, le=200)
    """Most lines a multi-line (block) suggestion may have."""
    first_lines_ms: int | None = Field(default=200, ge=0, le=10000)
    """A multi-line suggestion not finished this long after the request is shown with its
    complete lines so far; the rest keeps generating and comes as you accept or type
    through them. None: always wait for the whole block."""
    max_tokens: int = Field(default=64, ge=1, le=1024)
    """Most tokens the model generates for one suggestion."""
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    """Sampling temperature (default: the daemon profile's completion temperature)."""
    seed: int | None = None
    """Fixed sampling seed: the same suggestion for the same prompt (benchmarks, tests)."""
    context: ContextSources = Field(default_factory=ContextSources)
    context_budget_ms: float = Field(default=25.0, ge=0.0, le=1000.0)
    """Most time context gathering may take per request; slower sources are skipped for
    that keystroke (their answer is kept for the next one)."""
    completion_fallback: Literal["auto", "on", "off"] = "auto"
    """Also answer textDocument/completion: `auto` only for clients without inline
    completion (AI text in the popup slows it down), `on` always, `off` never."""
    telemetry: bool = True
    """Keep local counts of shown and accepted suggestions (never leaves the machine)."""
    speculative: bool = True
    """After a suggestion is accepted, ask for the next one at once."""

    @model_validator(mode="after")
    def _bounds(self) -> LspSettings:
        if self.debounce_min_ms > self.debounce_max_ms:
            raise ValueError("debounceMinMs must not exceed debounceMaxMs")
        return self


def _section(raw: Any) -> dict[str, Any]:
    """The settings object an editor sent, unwrapped from its section name if nested."""
    if not isinstance(raw, dict):
        return {}
    for name in _SECTION_NAMES:
        if isinstance(raw.get(name), dict):
            return raw[name]
    return raw


def merge_settings(current: LspSettings, raw: Any) -> LspSettings:
    """`current` updated with what the editor sent; raises ConfigError naming the field."""
    changes = _section(raw)
    if not changes:
        return current
    data = current.model_dump(by_alias=False)
    for key, value in changes.items():
        name = _snake(key)
        if name == "context" and isinstance(value, dict):
            data["context"] = {**data["context"], **{_snake(k): v for k, v in value.items()}}
        else:
            data[name] = value
    try:
        return LspSettings.model_validate(data)
    except ValidationError as err:
        problems = "; ".join(
            f"{'.'.join(to_camel(str(p)) for p in e['loc']) or 'settings'}: {e['msg']}"
            for e in err.errors()
        )
        raise ConfigError(f"invalid ling-local settings: {problems}") from None


def _snake(name: str) -> str:
    out = []
    for ch in name:
        if ch.isupper():
            out.append("_" + ch.lower())
        else:
            out.append(ch)
    return "".join(out).replace("-", "_")
