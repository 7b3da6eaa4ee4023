"""Every repository path, test file and section that a docstring, a comment or a document names
exists, and the layout page matches the package's tree. Read from the source (tokenize, ast and
the Markdown text), without importing anything and without running MkDocs.

- Paths: `tests/test_<name>.py`, `parley/<package>/<module>.py`, `bench/<name>.py`,
  `docs/<name>.md`, a path inside the package (`core/transitions.py`, `sql/steps.py`) and a bare
  test file name (`test_e2e_ui.py`). A file renamed or removed leaves no pointer to nothing
  behind; a document that is not in the repository is not cited either.
- Sections: `docs/<page>.md#<anchor>` anywhere, and a document's relative links
  (`[x](design.md#the-step-port)`, `[y](#states)`), name a heading of that page, its anchor
  spelt as MkDocs spells it (see `slug`).
- The layout: docs/layout.md names every module and package of `parley/`, and no file that is
  not there (see `layout_problems`).
"""

from __future__ import annotations

import ast
import functools
import io
import re
import subprocess
import tokenize
import unicodedata
from collections.abc import Iterator
from pathlib import Path

import mcp
import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "parley"
SDK = Path(mcp.__file__).resolve().parent.parent  # the folder the installed `mcp` package is in

# Where the comments and docstrings are read, and the documents read whole.
SOURCE_FOLDERS = ("parley", "tests", "bench", "examples", "docs")
DOCUMENTS = ("README.md", "docs/**/*.md", "bench/README.md")

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
# A section of one of the site's pages: `docs/<page>.md#<anchor>`.
ANCHORED = re.compile(_NOT_AFTER + r"(docs/(?:[\w.-]+/)*[\w.-]+\.md)#([\w-]+)")
CITING = (ROOTED, IN_PACKAGE, TEST_FILE, MISSING_DOCUMENT, ANCHORED)
# A match followed by one of these is a pattern (`tests/test_e2e_*.py`, `bench/<name>.py`).
PATTERN_NEXT = ("*", "<", "{", "[")
# A path followed by ` at `<commit>`` names the file as it was then (bench/README.md's records).
AT_COMMIT = re.compile(r"(?::\d+)?`? at `([0-9a-f]{7,40})`")
# The site's pages that the docs hook (mkdocs.yml, `hooks:`) writes at build time: never committed.
# Their anchors are the build's to check (`mkdocs build --strict`).
GENERATED = {"docs/reference/tools.md", "docs/reference/configuration.md"}
# Paths that are not the repository's: files a reader writes in their own project (the docs'
# examples), a benchmark writes in its own folder, or a test run leaves (not committed).
NOT_OURS = {
    "configs/agents/assistant.yaml",  # docs/models.md, docs/mcp-servers.md: an agent file of the reader's
    "configs/agents/deployer.yaml",  # docs/auth.md: an agent file of the reader's
    "configs/agents/migrator.yaml",  # docs/plan-mode.md: an agent file of the reader's
    "configs/agents/x.yaml",  # docs/configuration.md: the path in an example error message
    "configs/agents/bench.yaml",  # bench/README.md: written by the benchmarks in their folder
    "tests/screenshots/",  # written by tests/test_e2e_ui.py, not committed
    *GENERATED,
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


@functools.cache
def _texts() -> tuple[tuple[str, str], ...]:
    """(where, text) for every comment, docstring and document line that cites something (read
    once for all the checks of a run)."""
    found = []
    for path in _sources():
        where = str(path.relative_to(ROOT))
        found += [(f"{where}:{line}", text) for line, text in _prose_of(path)]
    for path in _documents():
        where = str(path.relative_to(ROOT))
        found += [(f"{where}:{n}", text) for n, text in enumerate(path.read_text().splitlines(), 1)]
    return tuple(found)


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


# ---------------------------------------------------------------------- sections of the site's pages

# A fenced code block opens with three or more backticks or tildes (and maybe a language), and
# closes with at least as many of the same, alone on their line.
FENCE = re.compile(r"^\s*(`{3,}|~{3,})(.*)$")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
# A heading's own id, by attr_list: `## Title {#id}` (or `{: #id .class}`).
HEADING_ID = re.compile(r"\s*\{:?\s*#([\w-]+)[^}]*\}\s*$")
# A Markdown link or image, with its target (no title).
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
# A target that is not a file of the repository: a URL, a mail address, an absolute path.
NOT_RELATIVE = re.compile(r"^(?:[a-z][a-z0-9+.-]*:|/)", re.IGNORECASE)
_UNIQUE = re.compile(r"^(.*)_([0-9]+)$")


def slug(heading: str) -> str:
    """A heading's anchor as MkDocs makes it (Python-Markdown's toc, with attr_list): its own id
    if it names one; else its text without Markdown (code spans keep their text, a link its
    words), ASCII only, without punctuation, lowercase, and each run of spaces and '-' one '-'."""
    own = HEADING_ID.search(heading)
    if own is not None:
        return own.group(1)
    text = re.sub(r"`([^`]*)`", r"\1", heading)
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = re.sub(r"<[^>]+>", "", text)
    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    text = re.sub(r"[^\w\s-]", "", text).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def _unique(anchor: str, taken: set[str]) -> str:
    """A second heading with the same anchor gets `_1`, a third `_2` (as the toc extension does)."""
    while anchor in taken or not anchor:
        counted = _UNIQUE.match(anchor)
        anchor = f"{counted.group(1)}_{int(counted.group(2)) + 1}" if counted else f"{anchor}_1"
    return anchor


def _outside_fences(text: str) -> Iterator[tuple[int, str]]:
    """The lines of a Markdown text that are not inside a fenced code block, with their numbers."""
    opened: str | None = None  # the fence of the block the line is in
    for number, line in enumerate(text.splitlines(), 1):
        fence = FENCE.match(line)
        if opened is None and fence is not None:
            opened = fence.group(1)
        elif opened is not None:
            closes = fence is not None and fence.group(1).startswith(opened) and not fence.group(2).strip()
            opened = None if closes else opened
        else:
            yield number, line


def anchors_of(text: str) -> frozenset[str]:
    """The anchors of a Markdown page's headings."""
    taken: set[str] = set()
    for _, line in _outside_fences(text):
        heading = HEADING.match(line)
        if heading is not None:
            taken.add(_unique(slug(heading.group(2)), taken))
    return frozenset(taken)


@functools.cache
def _page_anchors(path: Path) -> frozenset[str]:
    return anchors_of(path.read_text())


def _unknown_section(page: Path, anchor: str) -> str | None:
    """Why `page#anchor` names no section (None when it does, or when the build checks it)."""
    name = page.relative_to(ROOT).as_posix() if page.is_relative_to(ROOT) else str(page)
    if name in GENERATED:
        return None
    if not page.is_file():
        return f"{name}#{anchor} (no such page)"
    if anchor not in _page_anchors(page):
        return f"{name}#{anchor} (no such heading)"
    return None


def unknown_sections(text: str) -> list[str]:
    """The `docs/<page>.md#<anchor>` citations of `text` that name no heading of their page."""
    found = []
    for match in ANCHORED.finditer(text):
        problem = _unknown_section(ROOT / match.group(1), match.group(2))
        if problem is not None:
            found.append(problem)
    return found


def broken_links(document: Path, text: str) -> list[tuple[int, str]]:
    """A Markdown document's relative links (outside code blocks) to a file that is not there, or
    to a heading its page does not have; a link is relative to the document's folder."""
    found = []
    for number, line in _outside_fences(text):
        for match in LINK.finditer(re.sub(r"`[^`]*`", "", line)):
            target = match.group(1)
            if NOT_RELATIVE.match(target):
                continue
            path, _, anchor = target.partition("#")
            if not path:
                if anchor not in anchors_of(text):
                    found.append((number, f"{target} (no such heading)"))
                continue
            page = (document.parent / path).resolve()
            name = page.relative_to(ROOT).as_posix() if page.is_relative_to(ROOT) else str(page)
            if name in GENERATED:
                continue
            if not page.exists():
                found.append((number, f"{target} (no such file)"))
            elif anchor and page.suffix == ".md" and anchor not in _page_anchors(page):
                found.append((number, f"{target} (no such heading)"))
    return found


# ---------------------------------------------------------------------- the layout page

LAYOUT = ROOT / "docs" / "layout.md"
# A folder of the repository, named in backticks (`parley/runtime/mcp/`, `tests/`).
FOLDER = re.compile(r"`((?:parley|configs|docs|examples|tests|bench)/(?:[\w.-]+/)*)`")
# A table row whose first cell names something in backticks.
ROW = re.compile(r"^\|\s*`([^`]+)`")


def layout_sections(text: str) -> dict[str, list[str]]:
    """What the layout page lists, by folder: a heading that names a folder in backticks opens its
    section (any other heading closes it), and the first cell of each table row in it names a
    module, a file or a subfolder of that folder, in backticks."""
    sections: dict[str, list[str]] = {}
    folder: str | None = None
    for _, line in _outside_fences(text):
        heading = HEADING.match(line)
        if heading is not None:
            named = FOLDER.search(heading.group(2))
            folder = named.group(1) if named is not None else None
            if folder is not None:
                sections.setdefault(folder, [])
            continue
        row = ROW.match(line)
        if folder is not None and row is not None:
            sections[folder].append(row.group(1))
    return sections


def _packages(root: Path) -> dict[str, list[str]]:
    """The package's folders (those holding Python modules), each with the modules the layout must
    name: all of them but an empty `__init__.py`."""
    found: dict[str, list[str]] = {}
    for module in sorted(root.rglob("*.py")):
        if "__pycache__" in module.parts:
            continue
        folder = module.parent.relative_to(root.parent).as_posix() + "/"
        names = found.setdefault(folder, [])
        if module.name != "__init__.py" or module.read_text().strip():
            names.append(module.name)
    return found


def layout_problems(text: str, root: Path = ROOT) -> list[str]:
    """What the layout page `text` says that the tree under `root` contradicts: a package without
    a section, a module without a line, a line for something that is not there."""
    sections = layout_sections(text)
    problems = []
    for folder, names in sorted(_packages(root / "parley").items()):
        listed = sections.get(folder)
        if listed is None:
            problems.append(f"{folder} has no section")
            continue
        problems += [f"{folder}{name} has no line" for name in names if name not in listed]
    for folder, listed in sorted(sections.items()):
        for name in listed:
            if any(c in name for c in PATTERN_NEXT) or (root / folder / name).exists():
                continue
            problems.append(f"{folder}{name} is listed but not there")
    return problems


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


def test_every_section_a_citation_names_is_a_heading_of_its_page() -> None:
    found = [f"{where}: {what}" for where, text in _texts() for what in unknown_sections(text)]
    for document in _documents():
        where = document.relative_to(ROOT)
        found += [f"{where}:{n}: {what}" for n, what in broken_links(document, document.read_text())]
    assert not found, "a section or page that is not there:\n" + "\n".join(found)


SLUGS = {
    "The step port": "the-step-port",
    "A call and a turn, end to end": "a-call-and-a-turn-end-to-end",
    "HTTP and /v1": "http-and-v1",
    "`parley chat`: a conversation in the terminal": "parley-chat-a-conversation-in-the-terminal",
    "The AI SDK chat protocol (`useChat`, assistant-ui)": "the-ai-sdk-chat-protocol-usechat-assistant-ui",
    "What a crash leaves — and what recovery does": "what-a-crash-leaves-and-what-recovery-does",
    "The rules: `parley/core/` {#core}": "core",
    "[Links](elsewhere.md) count as their words": "links-count-as-their-words",
}


@pytest.mark.parametrize("heading", sorted(SLUGS))
def test_anchors_are_spelt_as_mkdocs_spells_them(heading: str) -> None:
    assert slug(heading) == SLUGS[heading]


def test_a_repeated_heading_gets_a_numbered_anchor_and_code_blocks_hold_none() -> None:
    page = "# Page\n\n## Twice\n\n```text\n## not a heading\n```\n\n## Twice\n\n### Twice\n"
    assert anchors_of(page) == {"page", "twice", "twice_1", "twice_2"}
    # A block closes on a fence of its own kind, alone on its line: a fence with a language, or a
    # shorter one, inside it is text.
    nested = "````markdown\n```python\n# inside\n```\n````\n```\n# code\n```sh\n# code\n```\n# Out\n"
    assert anchors_of(nested) == {"out"}


def test_the_section_checks_find_what_they_are_for(tmp_path: Path) -> None:
    assert unknown_sections("see docs/design.md#the-step-port and docs/design.md#no-such-part") == [
        "docs/design.md#no-such-part (no such heading)"
    ]
    assert unknown_sections("docs/gone.md#x, docs/reference/tools.md#any") == [
        "docs/gone.md#x (no such page)"
    ]
    (tmp_path / "other.md").write_text("# Other\n\n## Known part\n")
    page = tmp_path / "page.md"
    text = (
        "# Page\n\n[ok](other.md#known-part), [here](#page), [gone](#nowhere), [missing](missing.md), "
        "[part](other.md#unknown), [web](https://example.com/x.md#y), `[code](skipped.md)`\n\n"
        "```markdown\n[in a block](skipped.md)\n```\n"
    )
    assert broken_links(page, text) == [
        (3, "#nowhere (no such heading)"),
        (3, "missing.md (no such file)"),
        (3, "other.md#unknown (no such heading)"),
    ]


def test_the_layout_page_names_every_module_and_package_and_nothing_else() -> None:
    problems = layout_problems(LAYOUT.read_text())
    assert not problems, "docs/layout.md does not match the tree:\n" + "\n".join(problems)


def test_the_layout_check_finds_what_it_is_for(tmp_path: Path) -> None:
    package = tmp_path / "parley"
    (package / "core").mkdir(parents=True)
    (package / "sub").mkdir()
    (package / "__init__.py").write_text('"""the package"""\n')
    (package / "core" / "__init__.py").write_text("")
    (package / "core" / "rules.py").write_text("")
    (package / "core" / "more.py").write_text("")
    (package / "sub" / "thing.py").write_text("")
    text = (
        "# Layout\n\n## The root: `parley/`\n\n| module | holds |\n|---|---|\n"
        "| `__init__.py` | x |\n| `core/` | x |\n| `gone.py` | x |\n\n"
        "## `parley/core/` {#core}\n\n| `rules.py` | x |\n| `test_*.py` | a pattern |\n\n"
        "## Beside\n\n| `more.py` | outside any section: not read |\n"
    )
    assert layout_problems(text, tmp_path) == [
        "parley/core/more.py has no line",
        "parley/sub/ has no section",
        "parley/gone.py is listed but not there",
    ]
