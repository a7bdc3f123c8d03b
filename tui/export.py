"""A conversation as a Markdown file a person can read, diff or paste into an issue."""

from __future__ import annotations

import re
from datetime import datetime
from pathlib import Path

from tui.store import Conversation, StoredMessage

__all__ = ["conversation_markdown", "default_export_path", "write_export"]


def conversation_markdown(conversation: Conversation, messages: list[StoredMessage]) -> str:
    s = conversation.settings
    when = datetime.fromtimestamp(conversation.created).strftime("%Y-%m-%d %H:%M")
    lines = [f"# {conversation.title}", "", f"*Started {when} · {len(messages)} messages*", ""]
    sampling = []
    if s.temperature is not None:
        sampling.append(f"temperature {s.temperature:g}")
    if s.max_tokens is not None:
        sampling.append(f"max tokens {s.max_tokens}")
    if sampling:
        lines += [f"*Sampling: {', '.join(sampling)}*", ""]
    if s.system_prompt.strip():
        lines += ["## System", "", s.system_prompt.strip(), ""]
    for message in messages:
        who = "You" if message.role == "user" else (message.model or "Assistant")
        lines += [f"## {who}", ""]
        lines += [message.content.rstrip(), ""]
        if message.stats is not None:
            lines += [f"*{message.stats.format()}*", ""]
    return "\n".join(lines).rstrip() + "\n"


def default_export_path(conversation: Conversation, directory: Path | None = None) -> Path:
    slug = re.sub(r"[^a-z0-9]+", "-", conversation.title.lower()).strip("-")[:48] or "chat"
    return (directory or Path.cwd()) / f"{slug}-{conversation.id}.md"


def write_export(path: Path, conversation: Conversation, messages: list[StoredMessage]) -> Path:
    path = path.expanduser()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(conversation_markdown(conversation, messages), encoding="utf-8")
    return path
