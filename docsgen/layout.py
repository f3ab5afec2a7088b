"""The code's layout, generated from the package tree: each package with its docstring and
its modules' first docstring lines, and the import contracts of pyproject.toml. Read with
``ast`` (nothing is imported), so it follows every move of a module."""

import ast
import tomllib
from pathlib import Path
from typing import Any

from docsgen.text import escape_cell, escape_text

SKIP_DIRS = {"build", "site", "docs", "node_modules"}
"""Folders at the top level that are never code packages."""

MODULES_NOT_LISTED = ("tests", "migrations.versions")
"""Packages whose modules are counted, not listed (tests and migrations are many)."""


def docstring(path: Path) -> str:
    """A module's docstring, or ``""``."""
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except SyntaxError:
        return ""
    return ast.get_docstring(tree) or ""


def first_paragraph(text: str) -> str:
    return " ".join(text.strip().split("\n\n", 1)[0].split())


def packages(root: Path) -> list[tuple[str, Path]]:
    """Every package (a folder with ``__init__.py``) under the top-level packages of
    ``root``, as (dotted name, folder), sorted by name."""
    found: list[tuple[str, Path]] = []
    for top in sorted(root.iterdir()):
        if top.name in SKIP_DIRS or top.name.startswith(".") or not top.is_dir():
            continue
        if not (top / "__init__.py").is_file():
            continue
        for init in sorted(top.rglob("__init__.py")):
            folder = init.parent
            parts = folder.relative_to(root).parts
            if any(p.startswith(".") or p == "__pycache__" for p in parts):
                continue
            found.append((".".join(parts), folder))
    return sorted(found)


def _contracts(root: Path) -> list[dict[str, Any]]:
    pyproject = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))
    contracts: list[dict[str, Any]] = (
        pyproject.get("tool", {}).get("importlinter", {}).get("contracts", [])
    )
    return contracts


def render_contracts(root: Path) -> list[str]:
    lines = [
        "## Import contracts",
        "",
        "`make lint` checks these with import-linter (from `[tool.importlinter]` in "
        "`pyproject.toml`). In a layers contract a layer may import the layers below it, "
        "never those above; modules of one layer separated by `|` are independent of each "
        "other, those separated by `:` may import each other.",
        "",
    ]
    for contract in _contracts(root):
        lines += [f"### {escape_text(contract.get('name', ''))}", ""]
        kind = contract.get("type", "")
        if kind == "layers":
            lines.append("Layers, top first:")
            lines.append("")
            for number, layer in enumerate(contract.get("layers", []), 1):
                lines.append(f"{number}. `{layer}`")
            lines.append("")
        elif kind == "forbidden":
            sources = ", ".join(f"`{m}`" for m in contract.get("source_modules", []))
            forbidden = ", ".join(f"`{m}`" for m in contract.get("forbidden_modules", []))
            lines += [f"{sources} may not import {forbidden}.", ""]
        else:
            lines += [f"Type `{kind}`: " + escape_text(str(contract)), ""]
    return lines


def render(root: Path) -> str:
    lines = [
        "# Layout",
        "",
        "Generated from the package tree when the site is built: every package with its "
        "docstring, and each module's first docstring line. A module without a docstring "
        "shows none.",
        "",
    ]
    lines += render_contracts(root)
    lines += ["## Packages", ""]
    for name, folder in packages(root):
        lines += [f"### `{name}`", ""]
        text = docstring(folder / "__init__.py")
        lines += [escape_text(text) if text else "*No package docstring.*", ""]
        modules = sorted(p for p in folder.glob("*.py") if p.name != "__init__.py" and p.is_file())
        if not modules:
            continue
        if name.startswith(MODULES_NOT_LISTED):
            lines += [f"{len(modules)} modules.", ""]
            continue
        lines += ["| Module | What it holds |", "| --- | --- |"]
        for module in modules:
            summary = first_paragraph(docstring(module))
            lines.append(f"| `{module.stem}` | {escape_cell(summary)} |")
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"
