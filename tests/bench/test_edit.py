"""`bench edit`: the code-editing workload, and speculation giving the plain run's tokens."""

from __future__ import annotations

from ling_local.bench.edit import edit_speedup, edit_workload


def test_the_workload_is_the_file_then_its_renamed_copy() -> None:
    text = "def f(ticket):\n    return ticket\n" * 40
    prompt, rest = edit_workload(text, 500)
    original, _, rewrite = prompt.partition("\n\n# The same module, with `ticket` renamed")
    assert len(original) <= 500 and original.endswith("\n") and "entry" not in original
    head = rewrite.split(":\n", 1)[1]
    assert "ticket" not in head and "entry" in head
    # What a faithful rewrite continues with completes the renamed file exactly.
    assert head + rest == original.replace("ticket", "entry")


def test_prompt_lookup_and_draft_keep_the_plain_output() -> None:
    result = edit_speedup("tiny", new_tokens=24, repeats=1)
    assert result["prompt_tokens"] + 24 <= 2048
    assert result["none"]["tpot_ms"] > 0
    for mode in ("prompt_lookup", "draft"):
        assert result[mode]["same_tokens_as_plain"] is True
        assert result[mode]["accept_length"] is not None and result[mode]["accept_length"] >= 1
