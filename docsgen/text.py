"""Escaping generated text for Markdown (tables, prose), and the anchors Markdown gives
headings (Python-Markdown's ``toc`` slugify, which MkDocs uses)."""

import html
import re
import unicodedata


def escape_text(text: str) -> str:
    """Prose taken from code (help, docstrings, schema descriptions): no raw HTML, no
    accidental emphasis."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace("*", r"\*")


def escape_cell(text: str) -> str:
    """One table cell: escaped prose on one line, pipes escaped."""
    return " ".join(escape_text(text).split()).replace("|", r"\|")


_MARKUP = re.compile(r"`|\*\*|\*|\\")
_LINK = re.compile(r"!?\[([^\]]*)\]\([^)]*\)")


def slugify(heading: str) -> str:
    """The anchor of a heading, as Python-Markdown's toc extension makes it."""
    text = _LINK.sub(r"\1", heading)
    text = html.unescape(_MARKUP.sub("", text))
    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    text = re.sub(r"[^\w\s-]", "", text).strip().lower()
    return re.sub(r"[-\s]+", "-", text)
