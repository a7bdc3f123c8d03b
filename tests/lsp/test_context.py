"""Prompt windows, snippets and workspace retrieval, on real text and real llama-index."""

from __future__ import annotations

import subprocess
from pathlib import Path

from lsp.context import CursorContextBuilder, Snapshot, Snippet
from lsp.retrieval import WorkspaceIndex, list_files
from lsp.similar import OpenDocuments
from lsp.tokens import TokenCounter

MODULE = "\n".join(f"def helper_{i}(value):\n    return value * {i}\n" for i in range(200))


def snap_at_end(text: str, uri: str = "file:///w/main.py") -> Snapshot:
    return Snapshot(uri, text, len(text), "python", 1, "main.py")


def test_windows_fit_the_budget_and_the_suffix_is_whole_lines() -> None:
    counter = TokenCounter(chars_per_token=3.0)
    builder = CursorContextBuilder(counter, prefix_tokens=200, suffix_tokens=50)
    text = MODULE + "\n# cursor here\n" + MODULE
    offset = len(MODULE) + 1
    prompt = builder.build(Snapshot("u", text, offset, "python"), [])
    assert len(prompt.prefix) <= counter.chars_for(200)
    assert text[:offset].endswith(prompt.prefix)
    assert text[prompt.window_start - 1] == "\n"  # the window starts at a line start
    assert len(prompt.suffix) <= counter.chars_for(50)
    assert text[offset:].startswith(prompt.suffix) and prompt.suffix.endswith("\n")


def test_consecutive_keystrokes_share_the_prompt_start() -> None:
    """The window's start stays put while the user types, so the engine's prefix cache
    keeps hitting; it moves only when the window outgrows its budget."""
    builder = CursorContextBuilder(
        TokenCounter(chars_per_token=3.0), prefix_tokens=300, suffix_tokens=0
    )
    text = MODULE
    starts = []
    for extra in "x = helper_3(41)\nprint(x)\n":
        text += extra
        starts.append(builder.build(snap_at_end(text), []).window_start)
    assert len(set(starts)) == 1


def test_snippets_come_first_as_comments_within_budget() -> None:
    counter = TokenCounter(chars_per_token=3.0)
    builder = CursorContextBuilder(counter, prefix_tokens=400, suffix_tokens=0)
    snippets = [Snippet("lib/geometry.py", "def area(r):\n    return 3.14 * r * r\n", 0.5, "open")]
    prompt = builder.build(snap_at_end(MODULE + "print(area("), snippets)
    assert prompt.prefix.startswith("# Path: lib/geometry.py\n# def area(r):\n")
    assert "# Path: main.py\n" in prompt.prefix
    assert prompt.prefix.endswith("print(area(")
    assert len(prompt.prefix) <= counter.chars_for(400) + 64


def test_open_documents_rank_by_similarity() -> None:
    docs = OpenDocuments()
    geometry = "import math\n\ndef circle_area(radius):\n    return math.pi * radius ** 2\n"
    unrelated = "import json\n\ndef load_config(path):\n    return json.load(open(path))\n"
    query = snap_at_end("r = 2\nprint(circle_area(radius=r), math.pi)\n")
    found = docs.similar(
        query,
        [
            ("a", "geometry.py", 1, geometry),
            ("b", "cfg.py", 1, unrelated),
            (query.uri, "main.py", 1, query.text),
        ],
    )
    assert [s.path for s in found] == ["geometry.py"]
    assert "circle_area" in found[0].text


def test_workspace_index_finds_code_in_unopened_files(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "billing.py").write_text(
        "def compute_invoice_total(lines, tax_rate):\n"
        "    subtotal = sum(line.price * line.quantity for line in lines)\n"
        "    return subtotal * (1 + tax_rate)\n"
    )
    (tmp_path / "pkg" / "users.py").write_text("def create_user(name):\n    return {'n': name}\n")
    (tmp_path / "node_modules").mkdir()
    (tmp_path / "node_modules" / "dep.js").write_text("function invoice_total() {}\n")
    index = WorkspaceIndex([tmp_path])
    progress: list[tuple[int, int]] = []
    assert index.build(lambda done, total, _: progress.append((done, total))) >= 2
    assert progress[-1][0] == progress[-1][1] == 2  # node_modules skipped
    hits = index.query("total = compute_invoice_total(order.lines, tax_rate")
    assert hits and hits[0].path == "pkg/billing.py"
    # a save re-indexes the file
    (tmp_path / "pkg" / "users.py").write_text("def delete_user_account(uid):\n    pass\n")
    version = index.version
    index.update_file(tmp_path / "pkg" / "users.py")
    assert index.version == version + 1
    assert index.query("delete_user_account(")[0].path == "pkg/users.py"
    others = index.query("compute_invoice_total", exclude_path=str(tmp_path / "pkg/billing.py"))
    assert all(h.path != "pkg/billing.py" for h in others)


def test_indexing_a_hostile_repository_runs_none_of_its_programs(tmp_path: Path) -> None:
    repo, marker = tmp_path / "repo", tmp_path / "ran"
    (repo / "src").mkdir(parents=True)
    git = ["git", "-c", "init.defaultBranch=main", "-C", str(repo)]
    subprocess.run([*git, "init", "-q"], check=True)
    hook = f"touch {marker}; echo"
    for key, value in [
        ("core.fsmonitor", hook),
        ("core.hooksPath", str(tmp_path)),
        ("filter.evil.clean", hook),
        ("filter.evil.smudge", hook),
        ("diff.external", hook),
    ]:
        subprocess.run([*git, "config", key, value], check=True)
    (repo / ".gitattributes").write_text("* filter=evil diff=evil\n")
    (repo / ".gitignore").write_text("generated/\n*_secret.py\n")
    (repo / "src" / ".gitignore").write_text("local_*.py\n!local_keep.py\n")
    for name in [
        "src/app.py",
        "src/local_tmp.py",
        "src/local_keep.py",
        "api_secret.py",
        "generated/out.py",
    ]:
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(f"# {name}\nvalue = 1\n")
    outside = tmp_path / "outside.py"
    outside.write_text("password = 'x'\n")
    (repo / "src" / "linked.py").symlink_to(outside)

    found = sorted(p.relative_to(repo).as_posix() for p in list_files(repo))
    index = WorkspaceIndex([repo])
    index.build(lambda *_: None)

    assert not marker.exists(), "indexing ran a program the repository configured"
    assert found == ["src/app.py", "src/local_keep.py"]  # .gitignore holds; no symlink
