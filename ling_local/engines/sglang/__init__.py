"""SGLang as a managed child process of the daemon (the production engine).

- `command`: a profile -> the real ``python -m sglang.launch_server`` argv + environment
- `process`: the child in its own process group, its log file, stop without orphans
- `progress`: start-up progress read from SGLang's log
- `relay`: one ``/generate`` SSE stream -> `Delta`s
- `engine`: `SGLangEngine`, tying them together with health, warm-up and crash restarts
"""

from __future__ import annotations

from ling_local.engines.sglang.command import LaunchCommand, build_command, profile_flags
from ling_local.engines.sglang.engine import SGLangEngine
from ling_local.engines.sglang.process import child_info_file

__all__ = ["LaunchCommand", "SGLangEngine", "build_command", "child_info_file", "profile_flags"]
