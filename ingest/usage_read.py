"""Read the proxy's JSONL usage files in blocks with Arrow, checked as columns.

A file is read in blocks of whole lines. Each block is parsed by Arrow's JSON reader into
:data:`ingest.usage_checks.LINE_SCHEMA` and checked as columns; the rows the checks cannot
prove valid, and the idle records, go through the per-record schema one by one, which words
any error exactly as before. A block Arrow cannot read as one row per line (a malformed
line, a value of the wrong JSON type, a key no record has, two objects on a line, a stray
control character) is read line by line instead, so its bad lines are named too.

Lines are numbered as an editor shows them: from 1, blank lines counted, ``\\r\\n`` one
line end. A file whose lines another rule would number differently (a lone ``\\r``, which
Python's text mode reads as a line end) or that is not UTF-8 is left to the caller's
line-by-line reader (:class:`Unreadable`).
"""

from __future__ import annotations

import collections
import contextlib
import gzip
import io
import json
import queue
import threading
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pajson

from app.domain.usage import ReplicaIdleEvent, UsageEvent
from app.usage.columns import USAGE_COLUMNS, events_columns
from app.usage.schemas import record_from_json
from ingest.errors import Problem
from ingest.usage_checks import IDLE_ONLY, LINE_SCHEMA, check_block

BLOCK_BYTES = 32 << 20
_PARSE = pajson.ParseOptions(explicit_schema=LINE_SCHEMA, unexpected_field_behavior="infer")


class Unreadable(Exception):
    """The file must be read line by line from the start (see the module's docstring)."""


@dataclass
class Block:
    """What one block of a file holds."""

    usage: pa.Table
    """Its valid usage records in file order, as USAGE_COLUMNS."""
    idle: list[ReplicaIdleEvent] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    records: int = 0
    """Non-blank lines."""
    size: int = 0
    """Bytes of the file the block covers (uncompressed)."""


def read_blocks(path: Path, block_bytes: int = BLOCK_BYTES, workers: int = 1) -> Iterator[Block]:
    """The file's blocks, in order; with ``workers`` > 1, that many blocks are parsed and
    checked at once in threads (Arrow and the checks mostly release the GIL), still handed
    on in order.

    Raises:
        Unreadable: Where the file must be read line by line (before or between blocks).
        OSError, EOFError: If the file cannot be read.
    """
    chunks = _chunks(path, block_bytes)
    if workers <= 1:
        yield from (_block(path, data, first_line) for data, first_line in chunks)
        return
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="usage-block") as pool:
        pending: collections.deque[Future[Block]] = collections.deque()
        try:
            for data, first_line in chunks:
                pending.append(pool.submit(_block, path, data, first_line))
                if len(pending) >= workers:
                    yield pending.popleft().result()
            while pending:
                yield pending.popleft().result()
        finally:
            for future in pending:
                future.cancel()


def _chunks(path: Path, block_bytes: int) -> Iterator[tuple[pa.Buffer, int]]:
    """The file's whole lines in pieces of about ``block_bytes``, each with the number of
    its first line. Each piece is read into a buffer of its own and handed on as a view of
    it (only a partial last line is copied, to the next buffer)."""
    first_line = 1
    with _open(path) as stream:
        rest = b""
        while True:
            buffer = bytearray(len(rest) + block_bytes)
            buffer[: len(rest)] = rest
            read = stream.readinto(memoryview(buffer)[len(rest) :])
            filled = len(rest) + read
            if not read:
                if filled:
                    yield pa.py_buffer(memoryview(buffer)[:filled]), first_line
                return
            end = buffer.rfind(b"\n", 0, filled) + 1
            if end == 0:
                rest = bytes(buffer[:filled])
                continue
            rest = bytes(buffer[end:filled])
            yield pa.py_buffer(memoryview(buffer)[:end]), first_line
            first_line += buffer.count(b"\n", 0, end)


def prefetched(blocks: Iterator[Block], depth: int = 2) -> Iterator[Block]:
    """``blocks`` read ahead in a thread (Arrow and the checks mostly release the GIL), so
    the next blocks are parsed while the caller writes one. Exceptions come out in order;
    closing the iterator early stops the thread."""
    ready: queue.Queue[Block | BaseException | None] = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def produce() -> None:
        try:
            for block in blocks:
                while not stop.is_set():
                    try:
                        ready.put(block, timeout=0.1)
                        break
                    except queue.Full:
                        continue
                if stop.is_set():
                    return
            ready.put(None)
        except BaseException as exc:  # handed to the consumer
            ready.put(exc)
        finally:
            close = getattr(blocks, "close", None)
            if close is not None:
                close()

    thread = threading.Thread(target=produce, name="usage-blocks", daemon=True)
    thread.start()
    try:
        while (item := ready.get()) is not None:
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()
        while thread.is_alive():
            with contextlib.suppress(queue.Empty):
                ready.get(timeout=0.1)
        thread.join()


def _open(path: Path) -> io.BufferedIOBase:
    if path.suffix == ".gz":
        return gzip.open(path, "rb")
    return path.open("rb")


def _block(path: Path, data: pa.Buffer, first_line: int) -> Block:
    octets = np.frombuffer(data, dtype=np.uint8)
    returns = np.flatnonzero(octets == ord("\r"))
    if returns.size and not _all_before_newline(octets, returns):
        raise Unreadable
    lines = _lines(data)
    try:
        lines.validate(full=True)  # UTF-8
    except pa.ArrowInvalid:
        raise Unreadable from None
    if pc.all(pc.starts_with(lines, "{")).as_py():  # the usual file: no blank line, no indent
        written = np.arange(len(lines))
        texts: pa.Array = lines
    else:
        blank = _np_bool(pc.equal(pc.utf8_length(pc.utf8_trim(lines, " \t\r\n")), 0))
        written = np.flatnonzero(~blank)
        texts = lines.take(pa.array(written))
        objects = pc.starts_with(pc.utf8_ltrim(texts, " \t\r\n"), "{")
        if not pc.all(objects).as_py() and len(texts):  # Arrow can crash on a bare null
            return _line_by_line(path, texts, first_line + written, data.size)[0]
    numbers = first_line + written
    try:
        table = pajson.read_json(pa.BufferReader(data), parse_options=_PARSE)
    except pa.ArrowInvalid:
        return _line_by_line(path, texts, numbers, data.size)[0]
    extra = set(table.column_names) - set(LINE_SCHEMA.names) - set(IDLE_ONLY)
    if extra or table.num_rows != len(written):
        return _line_by_line(path, texts, numbers, data.size)[0]
    checked = check_block(table, texts)
    rows = checked.per_record
    block, usage_at = _line_by_line(path, texts.take(pa.array(rows)), numbers[rows], data.size)
    if block.usage.num_rows:
        order = np.argsort(np.concatenate([checked.usage_rows, rows[usage_at]]), kind="stable")
        block.usage = pa.concat_tables([checked.usage, block.usage]).take(pa.array(order))
    else:
        block.usage = checked.usage
    block.records = len(written)
    return block


def _all_before_newline(octets: np.ndarray, returns: np.ndarray) -> bool:
    """Whether every ``\\r`` is the first half of a ``\\r\\n`` (a lone one is a line end to
    Python's text mode, which numbers lines differently)."""
    following = returns + 1
    if following[-1] >= octets.size:
        return False
    return bool(np.all(octets[following] == ord("\n")))


def _lines(data: pa.Buffer) -> pa.LargeStringArray:
    """Each line of ``data`` (its end included), without copying."""
    ends = np.flatnonzero(np.frombuffer(data, dtype=np.uint8) == ord("\n")) + 1
    if not ends.size or ends[-1] != data.size:
        ends = np.append(ends, data.size)
    offsets = np.concatenate([[0], ends]).astype(np.int64)
    return pa.LargeStringArray.from_buffers(len(ends), pa.py_buffer(offsets), data)


def _np_bool(values: pa.Array) -> np.ndarray:
    result: np.ndarray = values.to_numpy(zero_copy_only=False)
    return result


def _line_by_line(
    path: Path, texts: pa.Array, numbers: np.ndarray, size: int
) -> tuple[Block, np.ndarray]:
    """The per-record path over some of a block's lines (never blank): the block, and which
    of the lines were usage records."""
    usage: list[UsageEvent] = []
    usage_at: list[int] = []
    block = Block(usage=USAGE_COLUMNS.empty_table(), records=len(texts), size=size)
    for index, (text, number) in enumerate(zip(texts.to_pylist(), numbers.tolist(), strict=True)):
        if not text.strip():
            continue
        try:
            record = record_from_json(json.loads(text))
        except ValueError as exc:  # json.JSONDecodeError is a ValueError
            block.problems.append(Problem(file=str(path), reason=str(exc), row=number))
            continue
        if isinstance(record, UsageEvent):
            usage.append(record)
            usage_at.append(index)
        else:
            block.idle.append(record)
    if usage:
        block.usage = events_columns(usage)
    return block, np.array(usage_at, dtype=np.int64)
