"""Is a wheel's licence clearly permissive? Read from its METADATA only.

Order: ``License-Expression`` (SPDX, PEP 639) decides alone when present; otherwise the
``License :: OSI Approved :: ...`` classifiers, then the free-text ``License`` field. Any copyleft
or unknown signal (GPL, LGPL, AGPL, MPL, EPL, a ``LicenseRef-``) rejects the package.
"""

from __future__ import annotations

import re
from email.message import Message

__all__ = ["PERMISSIVE_SPDX", "licence_of"]

PERMISSIVE_SPDX = {
    "MIT", "MIT-0", "MIT-CMU", "BSD-2-Clause", "BSD-3-Clause", "BSD-3-Clause-Clear", "0BSD",
    "Apache-2.0", "PSF-2.0", "Python-2.0", "ISC", "HPND", "Unlicense", "Zlib", "CC0-1.0",
    "BSL-1.0", "NCSA",
}  # fmt: skip

_CLASSIFIERS = {
    "MIT License": "MIT",
    "MIT No Attribution License (MIT-0)": "MIT-0",
    "BSD License": "BSD",
    "Apache Software License": "Apache-2.0",
    "Python Software Foundation License": "PSF-2.0",
    "ISC License (ISCL)": "ISC",
    "The Unlicense (Unlicense)": "Unlicense",
    "Historical Permission Notice and Disclaimer (HPND)": "HPND",
    "zlib/libpng License": "Zlib",
    "Boost Software License 1.0 (BSL-1.0)": "BSL-1.0",
}
_COPYLEFT = re.compile(r"\b(L?GPL|AGPL|MPL|EPL|EUPL|CDDL|copyleft|General Public|Mozilla)\b", re.I)
_FREE_TEXT = [
    (re.compile(r"^\s*(the\s+)?mit(\s+licen[sc]e)?\s*$", re.I), "MIT"),
    (re.compile(r"^\s*(new\s+|modified\s+|simplified\s+)?bsd([- ]?[23][- ]clause)?"
                r"(\s+licen[sc]e)?\s*$", re.I), "BSD"),
    (re.compile(r"^\s*apache(\s+software)?(\s+licen[sc]e)?[, ]*(v(ersion)?\s*)?2(\.0)?"
                r"(\s+licen[sc]e)?\s*$", re.I), "Apache-2.0"),
    (re.compile(r"^\s*(psf|python software foundation)(\s+licen[sc]e)?\s*$", re.I), "PSF-2.0"),
    (re.compile(r"^\s*isc(\s+licen[sc]e)?\s*$", re.I), "ISC"),
    (re.compile(r"^\s*(the\s+)?unlicen[sc]e\s*$", re.I), "Unlicense"),
    (re.compile(r"^\s*(MIT|BSD-[23]-Clause|Apache-2\.0)\s*$", re.I), None),
]  # fmt: skip


def _spdx_ok(expr: str) -> bool:
    """A permissive SPDX expression: every AND term permissive; an OR needs one permissive side."""
    expr = expr.replace("(", " ").replace(")", " ")
    for term in re.split(r"\s+AND\s+", expr.strip()):
        options = [o.strip() for o in re.split(r"\s+OR\s+", term) if o.strip()]
        options = [o.split(" WITH ", 1)[0].strip() for o in options]
        if not any(o in PERMISSIVE_SPDX for o in options):
            return False
    return True


def licence_of(meta: Message) -> str | None:
    """A short licence name when the metadata says the package is clearly permissive, else
    None."""
    expr = str(meta.get("License-Expression") or "")
    if expr:
        return expr.strip() if _spdx_ok(expr) else None
    classifiers = [c for c in meta.get_all("Classifier", []) if c.startswith("License ::")]
    text = str(meta.get("License") or "").strip()
    if any(_COPYLEFT.search(c) for c in classifiers) or _COPYLEFT.search(text[:2000]):
        return None
    found = set()
    for c in classifiers:
        tail = c.split("::")[-1].strip()
        if tail in _CLASSIFIERS:
            found.add(_CLASSIFIERS[tail])
        elif tail not in ("OSI Approved",):
            return None  # a licence we do not recognise
    first_line = text.splitlines()[0] if text else ""
    for pattern, name in _FREE_TEXT:
        if first_line and pattern.match(first_line):
            found.add(name or first_line.strip())
            break
    else:
        if first_line and not found and len(text) < 40:
            return None  # an unrecognised short licence name
    return " AND ".join(sorted(found)) if found else None
