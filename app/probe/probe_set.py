"""Probe sets: fixed prompt sets, versioned, each run recording the set's version and the
SHA-256 of its bytes.

The bundled set is ``app/data/probe_v1.jsonl``: 16 chat prompts (copy-heavy edits, code,
chat, questions), each with ``max_tokens`` 64, sent greedily (temperature 0). A bundled
file never changes once released (a test pins its hash); a new set is a new file
(``probe_v2.jsonl``), and a new set starts a new drift baseline.
"""

import hashlib
import json
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from app.domain.errors import Invalid

DEFAULT_VERSION = "v1"
BUNDLED_SHA256 = {"v1": "297f8833931860984c513dc382358de913b07d21a8dd0459cd0373cdef9ab15a"}
"""The bytes each bundled version was released with."""


class InvalidProbeSet(Invalid):
    """A probe set file that cannot be used."""

    code = "invalid_probe_set"


@dataclass(frozen=True, slots=True)
class ProbePrompt:
    id: str
    kind: str
    """``copy`` (the answer repeats the input), ``code``, ``chat`` or ``qa``."""
    messages: tuple[dict[str, str], ...]
    max_tokens: int


@dataclass(frozen=True, slots=True)
class ProbeSet:
    version: str
    sha256: str
    """Of the file's bytes."""
    prompts: tuple[ProbePrompt, ...]


def load_probe_set(path: Path | None = None, *, version: str | None = None) -> ProbeSet:
    """The bundled set (``version``, default v1), or the JSONL file at ``path`` (its
    version is ``version`` or the file's stem).

    Raises:
        InvalidProbeSet: For an unknown bundled version, or a file that is not a list of
            ``{"id", "messages", "max_tokens"}`` lines with unique ids.
    """
    if path is None:
        version = version or DEFAULT_VERSION
        if version not in BUNDLED_SHA256:
            raise InvalidProbeSet(
                f"no bundled probe set {version!r}; bundled: {', '.join(BUNDLED_SHA256)}"
            )
        data = resources.files("app").joinpath(f"data/probe_{version}.jsonl").read_bytes()
    else:
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise InvalidProbeSet(f"cannot read probe set {path}: {exc.strerror}") from None
        version = version or path.stem
    return ProbeSet(version, hashlib.sha256(data).hexdigest(), _parse(data))


def _parse(data: bytes) -> tuple[ProbePrompt, ...]:
    prompts: list[ProbePrompt] = []
    for number, line in enumerate(data.decode("utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            item: Any = json.loads(line)
            prompt = ProbePrompt(
                id=str(item["id"]),
                kind=str(item.get("kind", "chat")),
                messages=tuple(
                    {"role": str(m["role"]), "content": str(m["content"])} for m in item["messages"]
                ),
                max_tokens=int(item["max_tokens"]),
            )
        except (ValueError, KeyError, TypeError) as exc:
            raise InvalidProbeSet(f"probe set line {number}: {exc!r}") from None
        if not prompt.messages or prompt.max_tokens < 1:
            raise InvalidProbeSet(f"probe set line {number}: no messages, or max_tokens < 1")
        prompts.append(prompt)
    ids = [p.id for p in prompts]
    if not prompts or len(set(ids)) != len(ids):
        raise InvalidProbeSet("a probe set needs at least one prompt, with unique ids")
    return tuple(prompts)
