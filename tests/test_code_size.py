"""The project's size limits, read from the source with ast (nothing is imported): no module of
parley/ over 600 lines (none of parley/storage/ over 500), no function or method over 80, nested ones included (from its `def` line to its
last line)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "parley"
MODULE_MAX_LINES = 600
STORAGE_MODULE_MAX_LINES = 500  # issue [3/11]: storage is split by role, not grown in one file
FUNCTION_MAX_LINES = 80


def _modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def _name(path: Path) -> str:
    return path.relative_to(PACKAGE.parent).as_posix()


def _functions(tree: ast.Module) -> list[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
    """Every function and method of a module, nested ones too, with its dotted name there."""
    found: list[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                found.append((prefix + child.name, child))
                visit(child, f"{prefix}{child.name}.")
            elif isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.")
            else:
                visit(child, prefix)

    visit(tree, "")
    return found


def _lines(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    assert node.end_lineno is not None
    return node.end_lineno - node.lineno + 1


def test_the_scan_sees_the_modules_and_their_functions() -> None:
    names = {_name(path) for path in _modules()}
    assert {"parley/app.py", "parley/core/machine.py", "parley/storage/sql/sessions.py"} <= names
    tree = ast.parse(
        "class A:\n    def f(self):\n        def g():\n            pass\n\n\nasync def h():\n    pass\n"
    )
    assert [(name, _lines(node)) for name, node in _functions(tree)] == [("A.f", 3), ("A.f.g", 2), ("h", 2)]


def test_no_module_is_over_600_lines() -> None:
    long = [
        f"{_name(path)}: {count} lines"
        for path in _modules()
        if (count := len(path.read_text().splitlines())) > MODULE_MAX_LINES
    ]
    assert not long, f"modules over {MODULE_MAX_LINES} lines (split them by role):\n" + "\n".join(long)


def test_no_storage_module_is_over_500_lines() -> None:
    long = [
        f"{_name(path)}: {count} lines"
        for path in sorted((PACKAGE / "storage").rglob("*.py"))
        if (count := len(path.read_text().splitlines())) > STORAGE_MODULE_MAX_LINES
    ]
    assert not long, (
        f"storage modules over {STORAGE_MODULE_MAX_LINES} lines (split them by role):\n" + "\n".join(long)
    )


def test_no_function_is_over_80_lines() -> None:
    long = [
        f"{_name(path)}:{node.lineno} {name}: {_lines(node)} lines"
        for path in _modules()
        for name, node in _functions(ast.parse(path.read_text(), str(path)))
        if _lines(node) > FUNCTION_MAX_LINES
    ]
    assert not long, f"functions over {FUNCTION_MAX_LINES} lines (split them):\n" + "\n".join(long)
