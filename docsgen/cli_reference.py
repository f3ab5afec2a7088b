"""The command-line reference, generated from the ``specledger`` Typer/Click tree.

Typer vendors Click, so the tree is read by duck typing: a group has ``commands``, every
command has ``params`` (options and arguments) and ``help``.
"""

import re
from dataclasses import dataclass
from typing import Any

from docsgen.text import escape_cell, escape_text

ROOT_NAME = "specledger"


@dataclass(frozen=True)
class CommandInfo:
    """What the docs may name of one command: its subcommands (a group) and its options."""

    path: tuple[str, ...]
    """``("specledger", "ingest", "billing")``."""
    subcommands: frozenset[str]
    options: frozenset[str]
    """Every spelling of every option (``--month``, ``-m``, ``--no-serve``), ``--help`` too."""
    hidden: bool = False

    @property
    def is_group(self) -> bool:
        return bool(self.subcommands)

    @property
    def name(self) -> str:
        return " ".join(self.path)


def root_command() -> Any:
    """The Click command behind ``specledger`` (imports the CLI, which is cheap)."""
    import typer.main

    from app.cli import app

    return typer.main.get_command(app)


def walk(command: Any, path: tuple[str, ...] = (ROOT_NAME,)) -> list[tuple[tuple[str, ...], Any]]:
    """Every command below ``command`` (itself first), depth first, in the group's order."""
    found = [(path, command)]
    for name, sub in getattr(command, "commands", {}).items():
        found.extend(walk(sub, (*path, name)))
    return found


def command_tree(root: Any | None = None) -> dict[tuple[str, ...], CommandInfo]:
    """Each command's path mapped to what the docs may name of it."""
    root = root if root is not None else root_command()
    tree: dict[tuple[str, ...], CommandInfo] = {}
    for path, command in walk(root):
        options = {"--help"}
        for param in command.params:
            if param.param_type_name == "option":
                options.update(param.opts)
                options.update(param.secondary_opts)
        tree[path] = CommandInfo(
            path=path,
            subcommands=frozenset(getattr(command, "commands", {})),
            options=frozenset(options),
            hidden=bool(getattr(command, "hidden", False)),
        )
    return tree


def _short_help(command: Any) -> str:
    """The first sentence of a command's help, cut at 120 characters; a code span the cut
    opened is closed."""
    text = (command.get_short_help_str(limit=120) or "").strip()
    if text.count("`") % 2:
        text = text.replace("...", "`...") if text.endswith("...") else text + "`"
    return text


def _context(command: Any, name: str, parent: Any | None) -> Any:
    return command.context_class(command, info_name=name, parent=parent)


def _was_item(line: str) -> bool:
    return re.match(r"(?:[-*•+]|\\\*|\d{1,2}[.)])\s", line) is not None


def _help_text(help_text: str | None) -> str:
    """A command's help as Markdown: click's ``\\b`` markers dropped, indented lines kept
    as code (a blank line before them), prose escaped."""
    if not help_text:
        return ""
    out: list[str] = []
    for paragraph in help_text.split("\n\n"):
        lines = [line for line in paragraph.split("\n") if line.strip() != "\b"]
        if not lines:
            continue
        block: list[str] = []
        for line in lines:
            if line[:1].isspace():
                block.append("    " + line.rstrip())
            else:
                if block:
                    out.extend(["", *block, ""])
                    block = []
                item = re.match(r"(?:[-*•+]|\d{1,2}[.)])\s", line.strip()) is not None
                if item and out and out[-1] and not _was_item(out[-1]):
                    out.append("")
                out.append(escape_text(line.strip()))
        if block:
            out.extend(["", *block])
        out.append("")
    return "\n".join(out).strip() + "\n"


def _usage(command: Any) -> str:
    """``[OPTIONS] MONTH PATHS...`` as click prints it, with the arguments' names in capitals."""
    pieces = ["[OPTIONS]"] if command.params else []
    for param in command.params:
        if param.param_type_name != "argument" or getattr(param, "hidden", False):
            continue
        shown = param.metavar or (param.name or "").upper()
        if param.nargs != 1 or getattr(param, "multiple", False):
            shown += "..."
        pieces.append(shown if param.required else f"[{shown}]")
    if getattr(command, "commands", None):
        pieces.append("COMMAND [ARGS]...")
    return " ".join(pieces)


def _param_rows(command: Any, ctx: Any) -> tuple[list[str], list[str]]:
    arguments: list[str] = []
    options: list[str] = []
    for param in command.params:
        if getattr(param, "hidden", False):
            continue
        if param.param_type_name == "argument":
            required = "yes" if param.required else "no"
            many = " ..." if param.nargs != 1 or getattr(param, "multiple", False) else ""
            shown = param.metavar or (param.name or "").upper()
            arguments.append(
                f"| `{shown}{many}` | {required} | "
                f"{escape_cell(getattr(param, 'help', None) or '')} |"
            )
        elif param.param_type_name == "option":
            record = param.get_help_record(ctx)
            if record is None:
                continue
            spelling, help_text = record
            envvar = param.envvar if isinstance(param.envvar, str) else None
            if envvar and envvar not in help_text:
                help_text = f"{help_text} [env var: {envvar}]".strip()
            options.append(f"| `{spelling}` | {escape_cell(help_text)} |")
    return arguments, options


def render(root: Any | None = None) -> str:
    """The reference page: an index of every command, then each command's usage, help,
    arguments and options, as ``specledger COMMAND --help`` shows them."""
    root = root if root is not None else root_command()
    contexts: dict[tuple[str, ...], Any] = {}
    entries = walk(root)
    lines = [
        "# Command-line reference",
        "",
        "Generated from the `specledger` command tree when the site is built "
        "(`make docs`), so it lists every command and option there is. "
        "`specledger COMMAND --help` prints the same.",
        "",
        "## Commands",
        "",
    ]
    for path, command in entries[1:]:
        if getattr(command, "hidden", False):
            continue
        summary = _short_help(command)
        anchor = "-".join(path)
        indent = "    " * (len(path) - 2)
        lines.append(f"{indent}- [`{' '.join(path[1:])}`](#{anchor}): {escape_text(summary)}")
    lines.append("")
    for path, command in entries:
        if getattr(command, "hidden", False):
            continue
        parent = contexts.get(path[:-1])
        ctx = _context(command, path[-1], parent)
        contexts[path] = ctx
        pieces = _usage(command)
        lines += [f"## {' '.join(path)}", "", "```text", f"{' '.join(path)} {pieces}".rstrip()]
        lines += ["```", "", _help_text(command.help)]
        subcommands = getattr(command, "commands", {})
        if subcommands:
            lines += ["| Command | What it does |", "| --- | --- |"]
            for name, sub in subcommands.items():
                if getattr(sub, "hidden", False):
                    continue
                anchor = "-".join((*path, name))
                short = escape_cell(_short_help(sub))
                lines.append(f"| [`{name}`](#{anchor}) | {short} |")
            lines.append("")
        arguments, options = _param_rows(command, ctx)
        if arguments:
            lines += ["| Argument | Required | Meaning |", "| --- | --- | --- |", *arguments, ""]
        if options:
            lines += ["| Option | Meaning |", "| --- | --- |", *options, ""]
    return "\n".join(lines).rstrip() + "\n"
