"""Help text that wraps as the terminal does.

Docstrings are written with hard line breaks at about 100 columns. Typer joins the lines of a
command's first paragraph only; the later paragraphs, and the summaries in a group's command
list, keep the breaks, so the help broke mid-sentence at every width but one. :func:`reflow`
joins the lines of each prose paragraph so that Rich wraps it at the terminal's width, and
keeps what is laid out on purpose: blank lines between paragraphs, list items (``-``, ``*``,
``•``, ``1.``), indented lines (examples, literal blocks) and paragraphs that start with
click's ``\\b`` (no rewrap). :class:`ReflowingGroup`, the root command's class, applies it
once to every command and option below it.
"""

import inspect
import re
from typing import Any

from typer.core import TyperGroup

_ITEM = re.compile(r"(?:[-*•+]|\d{1,2}[.)])\s")
"""A line that starts a list item."""
_BLANK_LINE = re.compile(r"\n[ \t]*\n")


def reflow(text: str) -> str:
    """``text`` with every prose paragraph on one line; paragraphs one blank line apart.

    A list item and its continuation lines become one line; an indented line that does not
    continue an item is kept as it is (with its indentation); a paragraph that starts with
    ``\\b`` is kept as it is.
    """
    paragraphs = _BLANK_LINE.split(inspect.cleandoc(text))
    return "\n\n".join(_reflow_paragraph(p) for p in paragraphs if p.strip())


def _reflow_paragraph(paragraph: str) -> str:
    if paragraph.startswith("\b"):
        return paragraph
    lines: list[str] = []
    kind = ""  # of the last line: "prose", "item" or "literal"
    for line in paragraph.split("\n"):
        text = line.strip()
        if not text:
            continue
        indented = line[:1].isspace()
        if _ITEM.match(text):
            lines.append(line.rstrip())
            kind = "item"
        elif indented and kind != "item":
            lines.append(line.rstrip())
            kind = "literal"
        elif kind in ("prose", "item"):
            lines[-1] = f"{lines[-1]} {text}"
        else:
            lines.append(text)
            kind = "prose"
    return "\n".join(lines)


class ReflowingGroup(TyperGroup):
    """The root command group: once Typer has built the command tree, the help of every
    command, group and option in it is reflowed (:func:`reflow`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        _reflow_tree(self)


def _reflow_tree(command: Any) -> None:
    if command.help:
        command.help = reflow(command.help)
    for param in command.params:
        if getattr(param, "help", None):
            param.help = reflow(param.help)
    for sub in getattr(command, "commands", {}).values():
        _reflow_tree(sub)
