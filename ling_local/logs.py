"""Logging to a file under the state dir plus stderr."""

from __future__ import annotations

import logging
import logging.handlers
import sys
from pathlib import Path

from ling_local import paths

__all__ = ["setup_logging"]

_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def setup_logging(component: str, level: str = "info", *, stderr: bool = True) -> Path:
    """Send ling_local's logs to ``<state>/logs/<component>.log`` (rotated) and stderr."""
    log_dir = paths.ensure_private_dir(paths.log_dir())
    file = log_dir / f"{component}.log"
    root = logging.getLogger()
    root.setLevel(logging.DEBUG)
    for handler in list(root.handlers):
        if getattr(handler, "_ling_local", False):
            root.removeHandler(handler)
    file_handler = logging.handlers.RotatingFileHandler(
        file, maxBytes=5_000_000, backupCount=3, encoding="utf-8"
    )
    file_handler.setFormatter(logging.Formatter(_FORMAT))
    file_handler.setLevel(logging.DEBUG if level == "debug" else logging.INFO)
    file_handler._ling_local = True  # type: ignore[attr-defined]
    root.addHandler(file_handler)
    if stderr:
        err = logging.StreamHandler(sys.stderr)
        err.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
        err.setLevel(getattr(logging, level.upper(), logging.INFO))
        err._ling_local = True  # type: ignore[attr-defined]
        root.addHandler(err)
    for noisy in ("httpx", "httpcore", "urllib3"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    return file
