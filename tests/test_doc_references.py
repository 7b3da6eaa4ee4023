"""Every repository path and test file that a docstring, a comment or a document names exists:
`tests/test_<name>.py`, `parley/<package>/<module>.py`, `bench/<name>.py`, `docs/<name>.md`, a
path inside the package
(`core/transitions.py`, `sql/steps.py`) and a bare test file name (`test_e2e_ui.py`). A file
renamed or removed leaves no pointer to nothing behind; a document that is not in the repository
is not cited either. Read from the source (tokenize and ast), without importing anything."""

from __future__ import annotations

import ast
import functools
import io
import re
import subprocess
import tokenize
from collections.abc import Iterator
from pathlib import Path

import mcp

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "parley"
SDK = Path(mcp.__file__).resolve().parent.parent  # the folder the installed `mcp` package is in

# Where the comments and docstrings are read, and the documents read whole.
SOURCE_FOLDERS = ("parley", "tests", "bench", "examples")
DOCUMENTS = ("README.md", "docs/*.md", "bench/README.md")

# A path from the repository's root: to a file with an extension, or to a folder (ending in `/`;
# `parley/floor` is read as the folder `parley/`). Not preceded by a path character (a URL's own
# path, an absolute path) and ending on a name character (not the sentence's full stop).
_NOT_AFTER = r"(?<![\w./-])"
ROOTED = re.compile(
    _NOT_AFTER
    + r"((?:parley|tests|bench|docs|examples|configs|\.ci)/(?:[\w.-]+/)*(?:[\w-]+(?:\.[\w-]+)*\.[A-Za-z]+)?)"
)
# A path inside the package, from one of its folders (or, for mcp/..., the SDK's), to a file.
IN_PACKAGE = re.compile(
    _NOT_AFTER
    + r"((?:core|runtime|storage|server|client|testing|sql|providers|mcp|ui)/[\w./-]*\.(?:py|js|html|css))\b"
)
TEST_FILE = re.compile(_NOT_AFTER + r"(test_\w+\.py)\b")
# A section of a document that is not in the repository (the design notes parley began from).
MISSING_DOCUMENT = re.compile(r"\bDESIGN\b|protocol notes §")
CITING = (ROOTED, IN_PACKAGE, TEST_FILE, MISSING_DOCUMENT)
# A match followed by one of these is a pattern (`tests/test_e2e_*.py`, `bench/<name>.py`).
PATTERN_NEXT = ("*", "<", "{", "[")
# A path followed by ` at `<commit>`` names the file as it was then (bench/README.md's records).
AT_COMMIT = re.compile(r"(?::\d+)?`? at `([0-9a-f]{7,40})`")
# Paths that are not the repository's: files a reader writes in their own project (the docs'
# examples), a benchmark writes in its own folder, or a test run leaves (not committed).
NOT_OURS = {
    "configs/agents/assistant.yaml",  # docs/models.md, docs/mcp-servers.md: an agent file of the reader's
    "configs/agents/deployer.yaml",  # docs/auth.md: an agent file of the reader's
    "configs/agents/x.yaml",  # docs/configuration.md: the path in an example error message
    "configs/agents/bench.yaml",  # bench/README.md: written by the benchmarks in their folder
    "tests/screenshots/",  # written by tests/test_e2e_ui.py, not committed
}


def _sources() -> Iterator[Path]:
    for folder in SOURCE_FOLDERS:
        yield from sorted((ROOT / folder).rglob("*.py"))


def _documents() -> Iterator[Path]:
    seen: set[Path] = set()
    for pattern in DOCUMENTS:
        for path in sorted(ROOT.glob(pattern)):
            if path not in seen:
                seen.add(path)
                yield path


def _docstring_lines(tree: ast.Module) -> set[int]:
    """The lines of the module's, its classes' and its functions' docstrings."""
    lines: set[int] = set()
    bodies: list[list[ast.stmt]] = [tree.body]
    while bodies:
        body = bodies.pop()
        first = body[0] if body else None
        if (
            isinstance(first, ast.Expr)
            and isinstance(first.value, ast.Constant)
            and isinstance(first.value.value, str)
        ):
            lines.update(range(first.lineno, (first.end_lineno or first.lineno) + 1))
        for node in body:
            if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                bodies.append(node.body)
            elif isinstance(node, ast.With | ast.AsyncWith):
                bodies.append(node.body)  # functions defined under a `with`, an `if`, a `try`...
            elif isinstance(node, ast.If | ast.For | ast.AsyncFor | ast.While):
                bodies += [node.body, node.orelse]
            elif isinstance(node, ast.Try):
                bodies += [node.body, node.orelse, node.finalbody, *(h.body for h in node.handlers)]
    return lines


def _comments(text: str) -> dict[int, str]:
    """The comments of a Python text by line."""
    tokens = tokenize.generate_tokens(io.StringIO(text).readline)
    return {t.start[0]: t.string for t in tokens if t.type == tokenize.COMMENT}


def _prose_of(path: Path) -> Iterator[tuple[int, str]]:
    """A Python file's comments and docstrings, each line with its number: only the lines where
    something is cited (found by the patterns in the whole text first, which is fast)."""
    text = path.read_text()
    lines = text.splitlines()
    cited = [n for n, line in enumerate(lines, 1) if any(p.search(line) for p in CITING)]
    if not cited:
        return
    docstrings = _docstring_lines(ast.parse(text, str(path)))
    comments = _comments(text) if any(n not in docstrings for n in cited) else {}
    for number in cited:
        prose = lines[number - 1] if number in docstrings else comments.get(number)
        if prose is not None:
            yield number, prose


def _texts() -> Iterator[tuple[str, str]]:
    """(where, text) for every comment, docstring and document line that cites something."""
    for path in _sources():
        where = str(path.relative_to(ROOT))
        for line, text in _prose_of(path):
            yield f"{where}:{line}", text
    for path in _documents():
        where = str(path.relative_to(ROOT))
        for number, text in enumerate(path.read_text().splitlines(), 1):
            yield f"{where}:{number}", text


@functools.cache
def _test_files() -> frozenset[str]:
    return frozenset(p.name for folder in ("tests", "examples") for p in (ROOT / folder).rglob("test_*.py"))


@functools.cache
def _package_folders() -> tuple[Path, ...]:
    return (PACKAGE, *(p for p in PACKAGE.rglob("*") if p.is_dir() and p.name != "__pycache__"))


def _in_package(path: str) -> bool:
    if path.startswith("mcp/") and (SDK / path).exists():
        return True
    return any((folder / path).exists() for folder in _package_folders())


@functools.cache
def _existed(commit: str, path: str) -> bool:
    """Whether `path` was in the repository at `commit` (true when the history is not here): a
    rooted path, or one inside the package at any depth."""
    files = _files_at(commit)
    if files is None:
        return True
    if path.startswith(("parley/", "tests/", "bench/", "docs/", "examples/", "configs/")):
        return path in files or any(f.startswith(path.rstrip("/") + "/") for f in files)
    return any(f.startswith("parley/") and f.endswith("/" + path) for f in files)


@functools.cache
def _files_at(commit: str) -> frozenset[str] | None:
    listed = subprocess.run(
        ["git", "ls-tree", "-r", "--name-only", commit], cwd=ROOT, capture_output=True, text=True
    )
    return frozenset(listed.stdout.splitlines()) if listed.returncode == 0 else None


def _skipped(text: str, match: re.Match[str]) -> bool:
    """A pattern, or a path as it was at a named commit (and it was there then)."""
    after = text[match.end() :]
    if after[:1] in PATTERN_NEXT:
        return True
    at = AT_COMMIT.match(after)
    return at is not None and _existed(at.group(1), match.group(1))


def dangling(text: str) -> list[str]:
    """What `text` cites that is not in the repository."""
    found = []
    for match in ROOTED.finditer(text):
        path = match.group(1)
        if path not in NOT_OURS and not _skipped(text, match) and not (ROOT / path).exists():
            found.append(path)
    for match in IN_PACKAGE.finditer(text):
        if not _skipped(text, match) and not _in_package(match.group(1)):
            found.append(match.group(1))
    for match in TEST_FILE.finditer(text):
        if not _skipped(text, match) and match.group(1) not in _test_files():
            found.append(match.group(1))
    found += [f"a document not in the repository ({m.group(0)})" for m in MISSING_DOCUMENT.finditer(text)]
    return found


def test_the_check_finds_what_it_is_for_and_leaves_prose_alone() -> None:
    assert dangling("see tests/test_nothing_here.py and parley/gone.py") == [
        "tests/test_nothing_here.py",
        "parley/gone.py",
    ]
    assert dangling("runtime/gone.py; test_gone.py; DESIGN §4.2") == [
        "runtime/gone.py",
        "test_gone.py",
        "a document not in the repository (DESIGN)",
    ]
    assert not dangling("parley/core/states.py, core/transitions.py, sql/steps.py and test_docs.py.")
    assert not dangling("tests/test_e2e_*.py, bench/<name>.py, docs/, parley/floor")
    assert dangling("tests/gone/") == ["tests/gone/"]
    assert not dangling("the client/server split, https://example.com/tests/x.py, /tmp/parley/x.py")
    assert not dangling("mcp/shared/jsonrpc_dispatcher.py, in the SDK")


def test_every_path_a_docstring_comment_or_document_cites_exists() -> None:
    found = [f"{where}: {what}" for where, text in _texts() for what in dangling(text)]
    assert not found, "cited but not in the repository:\n" + "\n".join(found)


def test_only_comments_and_docstrings_of_python_are_read(tmp_path: Path) -> None:
    source = tmp_path / "module.py"
    source.write_text(
        '"""Cites tests/test_in_docstring.py."""\n'
        "\n"
        "DATA = 'tests/test_in_a_string.py'  # cites tests/test_in_comment.py\n"
        "\n"
        "def f() -> None:\n"
        "    '''And tests/test_in_function_docstring.py.'''\n"
        "    text = '''\n"
        "    # tests/test_in_a_string_too.py\n"
        "    '''\n"
    )
    cited = [what for _, text in _prose_of(source) for what in dangling(text)]
    assert cited == [
        "tests/test_in_docstring.py",
        "tests/test_in_comment.py",
        "tests/test_in_function_docstring.py",
    ]
