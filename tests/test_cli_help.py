"""Help text wraps as the terminal does (issue 28): docstrings' hard line breaks are gone from
every help page, and deliberate structure (paragraphs, lists, examples) stays."""

import re
from itertools import pairwise
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from rich.text import Text

from app.cli._help import reflow
from tests.test_cli_startup import cli_pages


def test_prose_lines_join_and_paragraphs_stay() -> None:
    doc = """Fit the step-time model to a sweep
    and report the breakeven concurrency.

    Prints the parameters with standard errors,
    predicted against measured speedup.
    """
    assert reflow(doc) == (
        "Fit the step-time model to a sweep and report the breakeven concurrency.\n\n"
        "Prints the parameters with standard errors, predicted against measured speedup."
    )


def test_list_items_stay_one_a_line_with_their_continuations_joined() -> None:
    doc = """Checks:

    - the bill balances to the
      micro;
    * every row is allocated
    1. first
    2) second, continued
    without indentation
    """
    assert reflow(doc) == (
        "Checks:\n\n"
        "- the bill balances to the micro;\n"
        "* every row is allocated\n"
        "1. first\n"
        "2) second, continued without indentation"
    )


def test_indented_examples_and_no_rewrap_blocks_are_kept() -> None:
    doc = """The steps, once per cluster::

        specledger slurm setup cluster.toml
        specledger slurm bill cluster.toml --month 2026-12

    Then allocate
    the month.

    \b
    keep
    these lines
    """
    assert reflow(doc) == (
        "The steps, once per cluster::\n\n"
        "    specledger slurm setup cluster.toml\n"
        "    specledger slurm bill cluster.toml --month 2026-12\n\n"
        "Then allocate the month.\n\n"
        "\b\nkeep\nthese lines"
    )


def test_a_prose_line_after_an_example_starts_a_new_line() -> None:
    assert reflow("Run:\n\n    a\n    b\nthen\nmore") == "Run:\n\n    a\n    b\nthen more"


_WORD = st.from_regex(r"[A-Za-z(][A-Za-z0-9,;:.'`()/=_-]{0,11}", fullmatch=True)
_PROSE = st.lists(_WORD, min_size=1, max_size=40)


@given(
    paragraphs=st.lists(_PROSE, min_size=1, max_size=5),
    breaks=st.lists(st.booleans(), min_size=200, max_size=200),
    indent=st.sampled_from(["", "    "]),
)
def test_reflowed_prose_is_one_line_a_paragraph_with_the_same_words(
    paragraphs: list[list[str]], breaks: list[bool], indent: str
) -> None:
    """However a docstring's prose is broken into lines (and indented, as docstrings are), the
    reflowed text has each paragraph on one line, its words in order, and reflowing it
    again changes nothing."""
    flags = iter(breaks)
    written = []
    for words in paragraphs:
        text = words[0]
        for word in words[1:]:
            text += f"\n{indent}" if next(flags, False) else " "
            text += word
        written.append(text)
    doc = f"\n\n{indent}".join(written)
    flowed = reflow(doc)
    assert flowed.split("\n\n") == [" ".join(words) for words in paragraphs]
    assert reflow(flowed) == flowed


# The rendered pages: each command's help at two terminal widths, in a fresh interpreter.


@pytest.fixture(scope="module", params=[60, 160], ids=lambda w: f"COLUMNS={w}")
def rendered(request: pytest.FixtureRequest) -> tuple[int, list[dict[str, Any]]]:
    width: int = request.param
    pages: list[dict[str, Any]] = cli_pages(columns=width)["pages"]
    return width, pages


def _words(text: str) -> list[str]:
    return Text.from_markup(text).plain.split()


def _description(output: str) -> list[list[str]]:
    """The paragraphs (lists of lines, the one-column padding removed) between the usage
    line and the first panel."""
    lines = output.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(" Usage:"))
    start = next(i for i in range(start, len(lines)) if not lines[i].strip())
    paragraphs: list[list[str]] = [[]]
    for line in lines[start:]:
        if line.startswith("╭"):
            break
        if line.strip():
            paragraphs[-1].append(line[1:].rstrip())
        elif paragraphs[-1]:
            paragraphs.append([])
    return [p for p in paragraphs if p]


def _commands_panel(output: str) -> tuple[int, list[list[str]]]:
    """Where the Commands panel's description column starts, and its cells, each as its
    lines."""
    lines = output.splitlines()
    top = next((i for i, line in enumerate(lines) if line.startswith("╭─ Commands")), None)
    if top is None:
        return 0, []
    rows = []
    for line in lines[top + 1 :]:
        if line.startswith("╰"):
            break
        rows.append(line)
    first = re.match(r"│ \S+\s+", rows[0])
    assert first is not None
    start = first.end()
    cells: list[list[str]] = []
    for row in rows:
        text = row[start:].rstrip().removesuffix("│").rstrip()
        if row[1:start].strip():
            cells.append([text])
        else:
            cells[-1].append(text)
    return start, cells


def _premature_breaks(paragraph: list[str], width: int) -> list[str]:
    """Lines followed by a break the next word would have fitted before: where a wrap at
    ``width`` would not have broken."""
    return [
        f"{line!r} then {following.split()[0]!r}"
        for line, following in pairwise(paragraph)
        if len(line.strip()) + 1 + len(following.split()[0]) <= width
    ]


def test_each_docstring_paragraph_is_one_wrapped_paragraph(
    rendered: tuple[int, list[dict[str, Any]]],
) -> None:
    """For every page: the description has the docstring's paragraphs, in order, with their
    words; and no line of a prose paragraph breaks before a word that would have fitted in
    the terminal's width (less Typer's one-column padding each side)."""
    width, pages = rendered
    problems: list[str] = []
    for page in pages:
        name = " ".join(["specledger", *page["path"]])
        # the docstring's paragraphs; reflow() tells prose (one line) from lists and examples
        expected = reflow(page["help"]).split("\n\n") if page["help"] else []
        shown = _description(page["output"])
        if [_words(p) for p in expected] != [_words(" ".join(p)) for p in shown]:
            problems.append(f"{name}: paragraphs differ")
            continue
        for paragraph, lines in zip(expected, shown, strict=True):
            if "\n" not in paragraph:  # prose; lists and examples keep their lines
                problems += [f"{name}: {p}" for p in _premature_breaks(lines, width - 2)]
    assert problems == []


def test_each_command_summary_wraps_in_its_column(
    rendered: tuple[int, list[dict[str, Any]]],
) -> None:
    """In every group's Commands panel, each summary fills the description column (the
    panel's width less the name column, the border and the padding) before it wraps."""
    width, pages = rendered
    problems: list[str] = []
    for page in pages:
        start, cells = _commands_panel(page["output"])
        column = width - start - 2
        for cell in cells:
            assert max(len(line) for line in cell) <= column
            problems += [
                f"{' '.join(['specledger', *page['path']])}: {p}"
                for p in _premature_breaks(cell, column)
            ]
    assert problems == []


def test_the_width_check_catches_hard_breaks() -> None:
    """A paragraph rendered with a docstring's hard breaks at a wide terminal fails the check;
    the same words wrapped at that width pass."""
    hard = [
        "Prints the parameters with standard errors, predicted against measured speedup per",
        "concurrency, the breakeven with a bootstrap 95% interval.",
    ]
    assert _premature_breaks(hard, 158) != []
    assert _premature_breaks(hard, 90) == []
