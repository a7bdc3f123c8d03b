"""Model engines behind one protocol (`ling_local.engines.base.Engine`)."""

from __future__ import annotations

from ling_local.config import Profile
from ling_local.engines.base import Engine

__all__ = ["make_engine"]


def make_engine(profile: Profile) -> Engine:
    """The engine a profile asks for (imported lazily: SGLang and torch are heavy)."""
    kind = profile.engine.kind
    if kind == "torch":
        from ling_local.engines.embedded import TorchEngine

        return TorchEngine(profile)
    if kind == "sglang":
        from ling_local.engines.sglang import SGLangEngine

        return SGLangEngine(profile)
    if kind == "remote":
        from ling_local.engines.remote import RemoteEngine

        return RemoteEngine(profile)
    raise ValueError(f"unknown engine kind {kind!r}")
