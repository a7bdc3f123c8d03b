"""Editor settings: camelCase, nested under the server's name, validated by field."""

from __future__ import annotations

import pytest

from ling_local.errors import ConfigError
from lsp.settings import LspSettings, merge_settings


def test_camel_case_nested_and_partial_updates() -> None:
    s = merge_settings(LspSettings(), {"ling-local": {"maxLines": 3, "debounceMs": 80}})
    assert (s.max_lines, s.debounce_ms) == (3, 80)
    s = merge_settings(s, {"context": {"workspace": False}})  # un-nested works too
    assert s.context.workspace is False and s.context.open_documents is True
    assert s.max_lines == 3  # what was not sent stays
    assert merge_settings(s, None) is s and merge_settings(s, {}) is s


@pytest.mark.parametrize(
    ("raw", "field"),
    [({"maxLines": 0}, "maxLines"), ({"debounceMs": "fast"}, "debounceMs"),
     ({"debounceMinMs": 500, "debounceMaxMs": 100}, "debounceMinMs"),
     ({"completionFallback": "sometimes"}, "completionFallback")],
)  # fmt: skip
def test_bad_values_are_named(raw: dict, field: str) -> None:
    with pytest.raises(ConfigError) as err:
        merge_settings(LspSettings(), raw)
    assert field in err.value.message
