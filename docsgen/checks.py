"""What makes the docs build fail: pure functions over the pages' text.

Pages are keyed by their path in the repository (``README.md``, ``docs/ledger.md``,
``docs/reference/cli.md``); each check returns problems as ``"PAGE:LINE: what"`` lines.
"""

import posixpath
import re
import shlex
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from docsgen.cli_reference import ROOT_NAME, CommandInfo
from docsgen.text import slugify

_FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})")
_INLINE_CODE = re.compile(r"(`+)((?:(?!\n[ \t]*\n).)+?)(?<!`)\1(?!`)", re.S)
_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*#*\s*$")
_SPECLEDGER = re.compile(rf"(?:^|(?<=[\s(/]))(?:[\w.$()/-]*/)?{ROOT_NAME}(?=\s|$)")
_MAKE = re.compile(r"(?:^|(?<=[\s(]))make\s+((?:[\w.-]+=\S*\s+)*)([a-z][\w-]*)")
_SETTING = re.compile(r"\bSPECLEDGER_[A-Z0-9_]*[A-Z0-9]\b")
_TARGET = re.compile(r"^([A-Za-z0-9][\w.-]*(?:\s+[A-Za-z0-9][\w.-]*)*)\s*:(?!=)", re.M)
_SEPARATORS = {"#", "&&", "||", ";", ">", ">>", "<", "2>&1", "&", "$", ")", "`"}


@dataclass(frozen=True)
class Mention:
    """A ``specledger ...`` command line found in a page."""

    page: str
    line: int
    tokens: tuple[str, ...]
    """The words after ``specledger``."""


def split_code(text: str) -> tuple[list[tuple[int, str]], str]:
    """The fenced code blocks' lines, each with its line number (from 1), and the text with
    those blocks blanked out (the same number of lines), for the prose checks."""
    code: list[tuple[int, str]] = []
    prose: list[str] = []
    fence: str | None = None
    for number, line in enumerate(text.split("\n"), 1):
        match = _FENCE.match(line)
        if fence is None and match:
            fence = match.group(2)[0] * 3
            prose.append("")
        elif fence is not None and line.strip().startswith(fence):
            fence = None
            prose.append("")
        elif fence is not None:
            code.append((number, line))
            prose.append("")
        else:
            prose.append(line)
    return code, "\n".join(prose)


def _without_inline_code(prose: str) -> str:
    return _INLINE_CODE.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), prose)


def _line_of(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def headings(text: str) -> set[str]:
    """The anchors of a page's headings (duplicates get ``_1``, ``_2`` as in toc)."""
    _, prose = split_code(text)
    seen: dict[str, int] = {}
    anchors = set()
    for line in prose.split("\n"):
        match = _HEADING.match(line)
        if not match:
            continue
        slug = slugify(match.group(2))
        if slug in seen:
            seen[slug] += 1
            slug = f"{slug}_{seen[slug]}"
        else:
            seen[slug] = 0
        anchors.add(slug)
    return anchors


def links(text: str) -> list[tuple[int, str]]:
    """Every Markdown link and image target outside code, with its line."""
    _, prose = split_code(text)
    prose = _without_inline_code(prose)
    return [(_line_of(prose, m.start()), m.group(1)) for m in _LINK.finditer(prose)]


def check_links(pages: Mapping[str, str], exists: Callable[[str], bool]) -> list[str]:
    """Each link of each page resolves: a page (and its heading, after ``#``) among
    ``pages``, or a file for which ``exists`` is true. A page under ``docs/`` may link only
    inside ``docs/`` (the site holds nothing else). External links are not followed."""
    anchors = {path: headings(text) for path, text in pages.items()}
    problems = []
    for page, text in pages.items():
        folder = posixpath.dirname(page)
        for line, target in links(text):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):
                continue
            path, _, anchor = target.partition("#")
            resolved = posixpath.normpath(posixpath.join(folder, path)) if path else page
            where = f"{page}:{line}: link {target!r}"
            if page.startswith("docs/") and not resolved.startswith("docs/"):
                problems.append(f"{where} leaves the docs folder")
            elif resolved in pages:
                if anchor and anchor not in anchors[resolved]:
                    problems.append(f"{where}: no heading #{anchor} in {resolved}")
            elif resolved.endswith(".md") or not exists(resolved):
                problems.append(f"{where}: no such page or file {resolved}")
            elif anchor:
                problems.append(f"{where}: an anchor into a file that is not a page")
    return problems


def _tokens(command_line: str) -> list[str]:
    try:
        return shlex.split(command_line, comments=True)
    except ValueError:
        return command_line.split()


def mentions(page: str, text: str) -> list[Mention]:
    """Every ``specledger`` command line of a page: in code blocks (a line, with its ``\\``
    continuations) and in inline code."""
    code, prose = split_code(text)
    found: list[Mention] = []
    joined: list[tuple[int, str]] = []
    pending: tuple[int, str] | None = None
    for number, line in code:
        if pending is not None:
            pending = (pending[0], pending[1] + " " + line.strip())
        else:
            pending = (number, line)
        if not pending[1].rstrip().endswith("\\"):
            joined.append(pending)
            pending = None
        else:
            pending = (pending[0], pending[1].rstrip()[:-1])
    if pending is not None:
        joined.append(pending)
    spans = [(n, line) for n, line in joined]
    spans += [
        (_line_of(prose, m.start()), " ".join(m.group(2).split()))
        for m in _INLINE_CODE.finditer(prose)
    ]
    for number, line in spans:
        for match in _SPECLEDGER.finditer(line):
            words = _tokens(line[match.end() :])
            found.append(Mention(page, number, tuple(words)))
    return found


def _option_name(token: str) -> str | None:
    """``--month``, from ``--month``, ``[--month``, ``--month=X``, ``--share-idle]``,
    ``--json)``; None for a word that is not an option (``-``, ``-3``, ``...``)."""
    word = token.lstrip("[(").split("=", 1)[0].rstrip("]),.;")
    if re.fullmatch(r"--?[A-Za-z][\w-]*", word):
        return word
    return None


def check_mention(mention: Mention, tree: Mapping[tuple[str, ...], CommandInfo]) -> list[str]:
    """The words after ``specledger`` name commands that exist and options they have."""
    path: tuple[str, ...] = (ROOT_NAME,)
    depth = 0
    problems = []
    where = f"{mention.page}:{mention.line}: `{ROOT_NAME} {' '.join(mention.tokens)}`"
    for token in mention.tokens:
        if token in _SEPARATORS or token.startswith(("$(", "`")):
            break
        depth += token.count("[") - token.count("]")
        if token == "|":
            if depth > 0:
                continue
            break
        info = tree[path]
        option = _option_name(token)
        if option is not None:
            if option not in info.options:
                problems.append(f"{where}: `{' '.join(path)}` has no option {option}")
            continue
        if token.startswith("-") or not info.is_group:
            continue
        if token in ("...", "…", "COMMAND", "[COMMAND]", "[OPTIONS]"):
            break
        if token in info.subcommands:
            path = (*path, token)
        else:
            problems.append(f"{where}: `{' '.join(path)}` has no command {token!r}")
            break
    return problems


def check_commands(
    pages: Mapping[str, str], tree: Mapping[tuple[str, ...], CommandInfo]
) -> list[str]:
    """Every ``specledger`` command line in the pages names real commands and options."""
    problems: list[str] = []
    for page, text in pages.items():
        for mention in mentions(page, text):
            problems += check_mention(mention, tree)
    return problems


def named_commands(
    pages: Mapping[str, str], tree: Mapping[tuple[str, ...], CommandInfo]
) -> set[tuple[str, ...]]:
    """The commands the pages name (each command on the way to it too)."""
    named: set[tuple[str, ...]] = set()
    for page, text in pages.items():
        for mention in mentions(page, text):
            path: tuple[str, ...] = (ROOT_NAME,)
            for token in mention.tokens:
                if token in tree[path].subcommands:
                    path = (*path, token)
                    named.add(path)
                elif not token.startswith("-"):
                    break
    return named


def check_documented(
    guide: Mapping[str, str], reference: str, tree: Mapping[tuple[str, ...], CommandInfo]
) -> list[str]:
    """Every command (hidden ones aside) has its section in the reference, and every command
    is named as ``specledger ...`` on some guide page, so a new one gets explained."""
    problems = []
    reference_anchors = headings(reference)
    named = named_commands(guide, tree)
    for path, info in tree.items():
        if info.hidden or path == (ROOT_NAME,):
            continue
        if slugify(" ".join(path)) not in reference_anchors:
            problems.append(f"the CLI reference has no section for `{' '.join(path)}`")
        if path not in named:
            problems.append(f"no guide page names `{' '.join(path)}` (document it)")
    return problems


CODE_ROOTS = (
    "app",
    "ingest",
    "serving",
    "dashboards",
    "bench",
    "tests",
    "scripts",
    "examples",
    "migrations",
    "docs",
    "docsgen",
)
"""Top-level folders whose files the pages may name in code (``app/ledger/costs.py``)."""
_PATH = re.compile(rf"^(?:{'|'.join(CODE_ROOTS)})/[\w./-]*")
_MODULE = re.compile(rf"^(?:{'|'.join(CODE_ROOTS)})(?:\.\w+)+$")


def _path_exists(path: str, exists: Callable[[str], bool]) -> bool:
    """A file or folder, or ``module.py`` named with an attribute (``waste.has_draft``)."""
    path = path.rstrip(".,;:)")
    if exists(path.rstrip("/")):
        return True
    module = re.match(r"^(.*/\w+)\.\w+$", path)
    return module is not None and exists(module.group(1) + ".py")


def _module_exists(dotted: str, exists: Callable[[str], bool]) -> bool:
    """A module or package, or one with an attribute after it (``app.domain.alerts.verify``)."""
    parts = dotted.split(".")
    for count in (len(parts), len(parts) - 1):
        base = "/".join(parts[:count])
        if count and (exists(base + ".py") or exists(base + "/__init__.py")):
            return True
    return False


def check_paths(pages: Mapping[str, str], exists: Callable[[str], bool]) -> list[str]:
    """Every repository path (``serving/proxy/wire.py``, ``tests/fixtures/engines``) and
    module (``bench.allocate``) that a page names in inline code exists, so a moved module
    cannot leave the docs behind."""
    problems = []
    for page, text in pages.items():
        _, prose = split_code(text)
        for match in _INLINE_CODE.finditer(prose):
            code = " ".join(match.group(2).split())
            word = re.split(r"\s|::", code, maxsplit=1)[0]
            line = _line_of(prose, match.start())
            if _PATH.match(word) and not _path_exists(word, exists):
                problems.append(f"{page}:{line}: `{code}`: no such file or folder (moved?)")
            elif _MODULE.match(word) and not _module_exists(word, exists):
                problems.append(f"{page}:{line}: `{code}`: no such module (moved?)")
    return problems


def make_targets(makefile: str) -> set[str]:
    """The targets a Makefile defines (``.PHONY`` and pattern rules aside)."""
    targets: set[str] = set()
    for match in _TARGET.finditer(makefile):
        targets.update(t for t in match.group(1).split() if not t.startswith("."))
    return targets


def check_make(pages: Mapping[str, str], targets: Iterable[str]) -> list[str]:
    """Every ``make TARGET`` in code (blocks and inline) is a target of the Makefile."""
    known = set(targets)
    problems = []
    for page, text in pages.items():
        code, prose = split_code(text)
        spans = [(n, line) for n, line in code]
        spans += [(_line_of(prose, m.start()), m.group(2)) for m in _INLINE_CODE.finditer(prose)]
        for number, line in spans:
            for match in _MAKE.finditer(line):
                if match.group(2) not in known:
                    problems.append(f"{page}:{number}: `make {match.group(2)}`: no such target")
    return problems


def settings_named(texts: Iterable[str]) -> set[str]:
    """Every ``SPECLEDGER_*`` name in some text (source, scripts, Makefile)."""
    names: set[str] = set()
    for text in texts:
        names.update(_SETTING.findall(text))
    return names


def check_settings(settings: Iterable[str], page: str, page_text: str) -> list[str]:
    """Every setting has a row of its own on the settings page (a table row starting with
    the name in code)."""
    rows = {m.group(1) for m in re.finditer(r"^\|\s*`(SPECLEDGER_[A-Z0-9_]+)`", page_text, re.M)}
    return [
        f"{page}: the setting {name} is not documented (add a row to its table)"
        for name in sorted(set(settings) - rows)
    ]


def nav_pages(nav: object) -> list[str]:
    """The page paths of an ``mkdocs.yml`` nav (nested lists of ``{title: path}``)."""
    if isinstance(nav, str):
        return [nav]
    if isinstance(nav, list):
        return [page for item in nav for page in nav_pages(item)]
    if isinstance(nav, dict):
        return [page for value in nav.values() for page in nav_pages(value)]
    return []


def check_nav(nav: object, pages: Iterable[str]) -> list[str]:
    """The nav names every page once, and only pages that exist (docs-relative paths)."""
    listed = nav_pages(nav)
    known = set(pages)
    problems = [f"mkdocs.yml: nav names {p}, which is not a page" for p in listed if p not in known]
    problems += [f"mkdocs.yml: nav lacks {p}" for p in sorted(known - set(listed))]
    problems += [
        f"mkdocs.yml: nav names {p} twice" for p in sorted(set(listed)) if listed.count(p) > 1
    ]
    return problems
