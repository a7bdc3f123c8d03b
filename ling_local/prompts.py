"""Prompt formats: fill-in-the-middle for completion, chat templates for chat.

User text is always tokenized with special-token parsing off, so a file that happens to
contain ``<|endoftext|>`` cannot end or re-steer its own prompt.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ling_local.config import PromptSettings
from ling_local.errors import RequestError
from ling_local.tokenization import TextTokenizer

__all__ = [
    "BLOCK_OPENER",
    "BuiltPrompt",
    "PromptBuilder",
    "completes_a_line",
    "fim_scope",
    "indent_width",
    "suffix_stops",
]

_PLAIN_STOP = "\n### User:"
_TURN_ENDS = ("<|im_end|>",)


@dataclass(slots=True)
class BuiltPrompt:
    text: str
    """The prompt as text (what a remote engine without a local tokenizer receives)."""
    ids: list[int] | None
    """Token ids when the daemon has the model's tokenizer."""
    stop: tuple[str, ...] = ()
    stop_token_ids: tuple[int, ...] = ()
    first_token_ids: list[int] | None = None
    """Token healing: what the first generated token may be."""
    heal_text: str = ""
    """Token healing: the prompt text the first token re-creates (cut from the output)."""
    scope: tuple[int, bool] | None = None
    """Fill-in-the-middle: see :func:`fim_scope`."""


def suffix_stops(suffix: str) -> tuple[str, ...]:
    """Where a fill-in-the-middle answer has run into the text after the cursor: the rest of
    the cursor's line, and the next non-blank line (with its indentation, after a newline).
    A small model often writes the middle and then the suffix again; these stops end the
    generation there (the stop text itself is never returned). Fragments too short to be
    telling (a lone bracket, `pass`) are left to the editor's own post-processing."""
    first, _, rest = suffix.partition("\n")
    stops = []
    if len(first.strip()) >= 3:
        stops.append(first.rstrip())
    following = next((line for line in rest.split("\n") if line.strip()), "")
    if len(following.strip()) >= 5:
        stops.append("\n" + following.rstrip())
    return tuple(stops)


BLOCK_OPENER = re.compile(r"(?:[:({\[]|=>|\bdo|\bthen)\s*(?:#.*)?$")
"""The end of a line that opens a block or a bracket: what follows goes on the next lines."""


def completes_a_line(prefix: str, suffix: str) -> bool:
    """Whether a fill-in-the-middle answer is the rest of the cursor's line alone: the
    cursor is inside a line (text after it), or after text that opens no block or bracket
    (someone typing a line). At the start of a line, on a blank one, or after an opener,
    the answer may take several lines (:func:`fim_scope`)."""
    line_prefix = prefix.rpartition("\n")[2]
    if not line_prefix:
        return False  # at the start of a line: whole lines go in before it
    if suffix.partition("\n")[0].strip():
        return True
    return bool(line_prefix.strip()) and not BLOCK_OPENER.search(line_prefix.rstrip())


def indent_width(line: str) -> int:
    """Columns of a line's leading whitespace, a tab counting 4."""
    expanded = line.expandtabs(4)
    return len(expanded) - len(expanded.lstrip())


def fim_scope(prefix: str, suffix: str) -> tuple[int, bool]:
    """The scope of a fill-in-the-middle answer: the indentation of the first non-blank line
    of code after the cursor (after the cursor's own line when the cursor is inside one; 0
    when nothing follows, at the end of a file), and whether the answer keeps its last
    newline (not when the suffix starts with one). A small model that has filled the gap
    goes on to write the next paragraph or function, which the suffix already has (or which
    nobody asked for): :class:`~ling_local.engines.embedded.detok.ScopeLimit` ends the
    answer before a line at that indentation after a blank line."""
    lines = suffix.split("\n")
    at_line_start = not prefix or prefix.endswith("\n")
    following = next((ln for ln in (lines if at_line_start else lines[1:]) if ln.strip()), "")
    return indent_width(following), not suffix.startswith("\n")


class PromptBuilder:
    def __init__(
        self, settings: PromptSettings, tokenizer: TextTokenizer | None, *, heal: bool = False
    ) -> None:
        self.settings = settings
        self.heal = heal and settings.token_healing
        self.tokenizer = tokenizer
        self._bos: list[int] = []
        self._fim: tuple[int, int, int] | None = None
        if tokenizer is not None:
            with_specials = tokenizer.hf("x", add_special_tokens=True)["input_ids"]
            plain = tokenizer.hf("x", add_special_tokens=False)["input_ids"]
            if len(with_specials) > len(plain) and with_specials[0] != plain[0]:
                self._bos = [with_specials[0]]
            ids = [tokenizer.token_id(t) for t in self._fim_tokens]
            if all(i is not None for i in ids):
                self._fim = (ids[0], ids[1], ids[2])  # type: ignore[assignment]
        self.stop = tuple(settings.stop)
        self.stop_token_ids = self._stop_ids(settings.stop)

    @property
    def _fim_tokens(self) -> tuple[str, str, str]:
        s = self.settings
        return (s.fim_prefix, s.fim_suffix, s.fim_middle)

    def _stop_ids(self, stops: list[str]) -> tuple[int, ...]:
        if self.tokenizer is None:
            return ()
        ids = list(self.tokenizer.eos_token_ids)
        for s in stops:
            tid = self.tokenizer.token_id(s)
            if tid is not None and tid not in ids:
                ids.append(tid)
        return tuple(ids)

    def _encode(self, text: str) -> list[int] | None:
        return None if self.tokenizer is None else self.tokenizer.encode(text)

    def completion(self, prompt: str, suffix: str | None = None) -> BuiltPrompt:
        """A plain completion, or fill-in-the-middle when a suffix is given."""
        if suffix is None:
            ids = self._encode(prompt)
            if ids is None:
                return BuiltPrompt(prompt, None, self.stop, self.stop_token_ids)
            ids, first, heal_text = self._heal(ids) if len(ids) > 1 else (ids, None, "")
            return BuiltPrompt(
                prompt,
                self._bos + ids,
                self.stop,
                self.stop_token_ids,
                first_token_ids=first,
                heal_text=heal_text,
            )
        return self.fim(prompt, suffix)

    def banned_token_ids(self) -> tuple[int, ...]:
        """The FIM control tokens a generation should never emit (none that stop it)."""
        if self.tokenizer is None or not self.settings.ban_fim_tokens:
            return ()
        names = (*self._fim_tokens, self.settings.fim_prefix.replace("prefix", "pad"))
        ids = {self.tokenizer.token_id(n) for n in names} - {None} - set(self.stop_token_ids)
        return tuple(sorted(ids))  # type: ignore[arg-type]

    def _heal(self, prefix_ids: list[int]) -> tuple[list[int], list[int] | None, str]:
        """Token healing: drop the prefix's last token when other tokens start with its text,
        and let the first generated token be any of those. A prompt that ends in a space
        (``from collections import ``) or inside a word (``self.na``) then continues as if
        the text had been tokenized whole (`` namedtuple``, ``name``)."""
        if not (self.heal and prefix_ids and self.tokenizer is not None):
            return prefix_ids, None, ""
        dropped = self.tokenizer.decode(prefix_ids[-1:], skip_special_tokens=False)
        if not dropped or "\ufffd" in dropped:
            return prefix_ids, None, ""
        allowed = self.tokenizer.tokens_starting_with(dropped)
        if len(allowed) <= 1:
            return prefix_ids, None, ""
        return prefix_ids[:-1], allowed, dropped

    def fim(self, prefix: str, suffix: str) -> BuiltPrompt:
        pre, suf, mid = self._fim_tokens
        spm = self.settings.fim_format == "spm"
        text = f"{pre}{suf}{suffix}{mid}{prefix}" if spm else f"{pre}{prefix}{suf}{suffix}{mid}"
        one_line = completes_a_line(prefix, suffix)
        scope = None if one_line else fim_scope(prefix, suffix)
        stops = (*self.stop, *suffix_stops(suffix), *(("\n",) if one_line else ()))
        if self.tokenizer is None:
            return BuiltPrompt(text, None, stops, scope=scope)
        if self._fim is None:
            raise RequestError(
                "this model has no fill-in-the-middle tokens "
                f"({pre}, {suf}, {mid}); send the request without 'suffix'",
                param="suffix",
            )
        p, s, m = self._fim
        enc = self.tokenizer.encode
        prefix_ids, first, heal_text = self._heal(enc(prefix))
        suffix_ids = enc(suffix)
        ids = [p, s, *suffix_ids, m, *prefix_ids] if spm else [p, *prefix_ids, s, *suffix_ids, m]
        return BuiltPrompt(
            text,
            self._bos + ids,
            stops,
            self.stop_token_ids,
            first_token_ids=first,
            heal_text=heal_text,
            scope=scope,
        )

    def chat(self, messages: list[dict[str, str]]) -> BuiltPrompt:
        style = self.settings.chat_template
        if style == "model" and self.tokenizer is not None and self.tokenizer.chat_template:
            text = self.tokenizer.apply_chat_template(messages)
            ids = self.tokenizer.encode_with_specials(text)
            # a ChatML template ends each turn with <|im_end|>: the answer stops there
            ends = [t for t in _TURN_ENDS if t in self.tokenizer.chat_template]
            stops = list(dict.fromkeys([*self.settings.stop, *ends]))
            return BuiltPrompt(text, ids, tuple(stops), self._stop_ids(stops))
        if style == "chatml":
            text = (
                "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages)
                + "<|im_start|>assistant\n"
            )
            ids = None if self.tokenizer is None else self.tokenizer.encode_with_specials(text)
            stop = (*self.stop, "<|im_end|>")
            return BuiltPrompt(text, ids, stop, self._stop_ids([*self.settings.stop, "<|im_end|>"]))
        return self._plain_chat(messages)

    def _plain_chat(self, messages: list[dict[str, str]]) -> BuiltPrompt:
        parts = []
        for m in messages:
            if m["role"] == "system":
                parts.append(f"{m['content']}\n\n")
            else:
                label = "User" if m["role"] == "user" else "Assistant"
                parts.append(f"### {label}:\n{m['content']}\n\n")
        text = "".join(parts) + "### Assistant:\n"
        ids = self._encode(text)
        return BuiltPrompt(
            text,
            None if ids is None else self._bos + ids,
            (*self.stop, _PLAIN_STOP),
            self.stop_token_ids,
        )
