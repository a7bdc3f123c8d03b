"""Workspace retrieval: the project's files split into code chunks (llama-index
`CodeSplitter` on tree-sitter where a grammar is installed) and searched with BM25
(`llama-index-retrievers-bm25`), so code the user has not opened can reach the prompt.

Everything heavy (importing llama-index, reading and parsing files, building the index)
runs in a worker thread; the completion path only ever calls `query`, which reads the
current index and never waits for a rebuild.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import logging
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lsp.context import Snippet
from lsp.files import list_files as _walk

__all__ = ["WorkspaceIndex", "in_background"]

log = logging.getLogger(__name__)

_CODE_EXTENSIONS = {
    ".py": "python", ".pyi": "python", ".js": "javascript", ".jsx": "javascript",
    ".ts": "typescript", ".tsx": "tsx", ".go": "go", ".rs": "rust", ".java": "java",
    ".c": "c", ".h": "c", ".cc": "cpp", ".cpp": "cpp", ".hpp": "cpp", ".rb": "ruby",
    ".lua": "lua", ".sh": "bash", ".kt": "kotlin", ".swift": "swift", ".php": "php",
    ".cs": "c_sharp", ".scala": "scala", ".toml": "toml", ".md": "markdown",
}  # fmt: skip
MAX_FILES = 5000
MAX_FILE_BYTES = 256 * 1024
CHUNK_LINES = 30
ProgressFn = Callable[[int, int, str], None]


def in_background(fn: Callable[..., Any], *args: Any) -> asyncio.Future[Any]:
    """Run `fn` in a daemon thread: unlike the loop's executor, an editor quitting mid-index
    does not have to wait for the index before the server can exit."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[Any] = loop.create_future()

    def settle(result: Any, error: BaseException | None) -> None:
        if future.done():
            return
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)

    def work() -> None:
        try:
            result, error = fn(*args), None
        except BaseException as exc:  # handed to the awaiting coroutine
            result, error = None, exc
        with contextlib.suppress(RuntimeError):  # a closed loop: the server is exiting
            loop.call_soon_threadsafe(settle, result, error)

    threading.Thread(target=work, name="ling-index", daemon=True).start()
    return future


def list_files(root: Path, limit: int = MAX_FILES) -> list[Path]:
    """The workspace's source files (git's ignore rules hold; no program is run)."""
    return _walk(root, limit, lambda p: p.suffix in _CODE_EXTENSIONS and _small_file(p))


def _small_file(path: Path) -> bool:
    try:
        return 0 < path.stat().st_size <= MAX_FILE_BYTES
    except OSError:
        return False


def _parser(language: str) -> Any | None:
    """A tree-sitter parser from an installed grammar package, or None."""
    try:
        import tree_sitter

        module = importlib.import_module(f"tree_sitter_{language}")
        fn = getattr(module, f"language_{language}", None) or module.language
        return tree_sitter.Parser(tree_sitter.Language(fn()))
    except Exception:
        return None


def _blank_line_chunks(text: str, lines_per_chunk: int = CHUNK_LINES) -> list[str]:
    """Chunks of about `lines_per_chunk` lines, broken at blank lines (no grammar)."""
    chunks, current = [], []
    for line in text.split("\n"):
        current.append(line)
        if (len(current) >= lines_per_chunk and not line.strip()) or len(
            current
        ) >= lines_per_chunk * 2:
            chunks.append("\n".join(current))
            current = []
    if any(x.strip() for x in current):
        chunks.append("\n".join(current))
    return [c for c in chunks if c.strip()]


class WorkspaceIndex:
    """BM25 over the chunks of one workspace's files; thread-safe swaps, lock-free reads."""

    def __init__(self, roots: list[Path]) -> None:
        self.roots = roots
        self._chunks: dict[str, list[str]] = {}
        self._retriever: Any | None = None
        self._splitters: dict[str, Any] = {}
        self._lock = threading.Lock()
        self.version = 0
        self.ready = False

    # ------------------------------------------------------------------ building
    def _split(self, path: Path, text: str) -> list[str]:
        language = _CODE_EXTENSIONS.get(path.suffix, "")
        splitter = self._splitters.get(language)
        if splitter is None and language not in self._splitters:
            parser = _parser(language)
            if parser is not None:
                from llama_index.core.node_parser import CodeSplitter

                splitter = CodeSplitter(
                    language=language, parser=parser, tokenizer=str.split,
                    chunk_lines=CHUNK_LINES, max_chars=1500,
                )  # fmt: skip
            self._splitters[language] = splitter
        if splitter is None:
            return _blank_line_chunks(text)
        try:
            return [c for c in splitter.split_text(text) if c.strip()]
        except Exception:  # a file the grammar cannot parse
            return _blank_line_chunks(text)

    def build(self, progress: ProgressFn | None = None) -> int:
        """(Re)index every file under the roots; returns the number of chunks."""
        files = [f for root in self.roots for f in list_files(root)]
        chunks: dict[str, list[str]] = {}
        for i, path in enumerate(files):
            if progress is not None and (i % 25 == 0 or i == len(files) - 1):
                progress(i + 1, len(files), path.name)
            try:
                text = path.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError):
                continue
            chunks[str(path)] = self._split(path, text)
        with self._lock:
            self._chunks = chunks
        return self._rebuild()

    def update_file(self, path: Path, text: str | None = None) -> int:
        """Re-chunk one file (after a save) and rebuild the BM25 index."""
        if path.suffix not in _CODE_EXTENSIONS:
            return 0
        if text is None:
            try:
                text = path.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError):
                text = ""
        parts = self._split(path, text) if text else []
        with self._lock:
            self._chunks = {**self._chunks, str(path): parts}
        return self._rebuild()

    def _rebuild(self) -> int:
        import Stemmer
        from llama_index.core.schema import TextNode
        from llama_index.retrievers.bm25 import BM25Retriever

        with self._lock:
            snapshot = dict(self._chunks)
        nodes = [
            TextNode(
                text=chunk,
                metadata={"path": path},
                excluded_embed_metadata_keys=["path"],
                excluded_llm_metadata_keys=["path"],
            )
            for path, parts in snapshot.items()
            for chunk in parts
        ]
        retriever = None
        if nodes:
            retriever = BM25Retriever.from_defaults(
                nodes=nodes, similarity_top_k=min(8, len(nodes)),
                stemmer=Stemmer.Stemmer("english"), language="english",
            )  # fmt: skip
        with self._lock:
            self._retriever = retriever
            self.version += 1
            self.ready = True
        return len(nodes)

    # ------------------------------------------------------------------ querying
    def query(self, text: str, *, exclude_path: str = "", limit: int = 3) -> list[Snippet]:
        """Chunks most like `text` (BM25), from files other than `exclude_path`."""
        retriever = self._retriever
        if retriever is None or not text.strip():
            return []
        found = []
        for hit in retriever.retrieve(text):
            path = hit.node.metadata.get("path", "")
            if path == exclude_path or (hit.score or 0.0) <= 0.0:
                continue
            found.append(Snippet(self._display(path), hit.node.get_content(), hit.score, "bm25"))
            if len(found) >= limit:
                break
        return found

    def _display(self, path: str) -> str:
        for root in self.roots:
            try:
                return str(Path(path).relative_to(root))
            except ValueError:
                continue
        return path
