"""The metering proxy at tier-3 concurrency: thousands of streamed chat completions at once,
straight to a stub vLLM, through a bare relay (the anchor) and through `specledger proxy`
with one and two workers, side by side in one run.

    .venv/bin/python -m bench.proxy_scale [--streams 200,1000,3000] [--tokens 64]
        [--interval-ms 20] [--quick] [--json]

Every stream is a chat completion of ``--tokens`` tokens, one every ``--interval-ms``, with
vLLM's usage on every chunk (``stream_options`` ``include_usage`` and
``continuous_usage_stats``), from a stub vLLM in its own process that answers at once
(:mod:`bench.stub_upstream`). At each level all streams start together; the load client
(raw asyncio protocols, HTTP/1.1, one connection per stream) records when each SSE event
arrives. Per arm and level it prints events/s (every data event received, over the level's
wall time), p50/p99 of the gap between a stream's consecutive token events, p50/p99 of the
time to a stream's first event and p99 of its duration (queueing that the gaps hide), and
the CPU time (user + system, the process and its children) per relayed event of the relay
or proxy, of the client and of the stub. The proxy runs as ``specledger proxy`` (uvicorn) with SQLite and a
proxy key checked on every request, the stub as its vLLM replica; once stopped (SIGINT, so
it writes everything out) its database must hold every request exactly once, under the
event id the client was told, and GPU time must be conserved: requests + idle = GPUs x
metered wall time, the idle windows tiling that time. The ``--workers 2`` arm shows "not
available" while `specledger proxy` has no such option.

Targets (issue 28) are printed as met / not met next to the ratios: proxy CPU per event at
most 3x the bare relay's and at most 60 us; events/s at least 0.95 of direct at 200
streams; p99 gap at most 3x direct's; every request metered once; GPU-seconds conserved.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import deque
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any, cast

import numpy as np
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app import migrate
from app.auth.service import ProxyKeyOptions, create_key
from app.db import make_engine
from app.models import ReplicaIdle, UsageRecord
from bench.stub_upstream import run_loop

ROOT = Path(__file__).resolve().parents[1]
REPLICA = "stub"
"""The stub's replica name in usage records."""
MODEL = "stub"
CPU_VS_RELAY = 3.0
CPU_US_MAX = 60.0
EVENTS_VS_DIRECT = 0.95
"""At TARGET_STREAMS streams."""
TARGET_STREAMS = 200
P99_VS_DIRECT = 3.0
CONNECTS_AT_ONCE = 256
"""Connections being opened at once: a burst of thousands overflows listen backlogs (a lost
SYN costs a 1 s retransmit, which would be measured as the server's latency)."""
ARMS = ("direct", "relay", "proxy", "proxy-2w")
ONE_US = timedelta(microseconds=1)


# ---------------------------------------------------------------------------------------
# the load client


class _StreamClient(asyncio.Protocol):
    """One streamed completion on its own connection: sends the request, de-chunks the
    body, and notes the arrival time of every SSE event (the end of its blank line)."""

    def __init__(self, request: bytes, done: asyncio.Future[None]) -> None:
        self.request = request
        self.done = done
        self.transport: asyncio.Transport | None = None
        self.times: list[float] = []
        self.head = b""
        self.in_head = True
        self.status = 0
        self.event_id = ""
        self.buffer = b""
        self.need = -1  # bytes of chunk data (with its CRLF) still to come; -1: a size line
        self.newline = False  # the payload so far ends with "\n"
        self.tail: deque[bytes] = deque(maxlen=8)  # the last chunks, to check the ending
        self.error_body = b""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport = cast(asyncio.Transport, transport)
        self.transport = transport
        transport.write(self.request)

    def data_received(self, data: bytes) -> None:
        now = time.perf_counter()
        if self.in_head:
            self.head += data
            end = self.head.find(b"\r\n\r\n")
            if end < 0:
                return
            data = self.head[end + 4 :]
            self._parse_head(self.head[:end])
            self.in_head = False
            if self.status != 200:
                self.error_body = data
                self._finish()
                return
        self.buffer += data
        buffer, pos = self.buffer, 0
        while True:
            if self.need < 0:
                end = buffer.find(b"\r\n", pos)
                if end < 0:
                    break
                size = int(buffer[pos:end].split(b";")[0], 16)
                pos = end + 2
                if size == 0:
                    self._finish()
                    return
                self.need = size + 2
            if len(buffer) - pos < self.need:
                break
            payload = buffer[pos : pos + self.need - 2]
            pos += self.need
            self.need = -1
            ends = payload.count(b"\n\n") + (self.newline and payload[:1] == b"\n")
            self.newline = payload[-1:] == b"\n"
            self.times.extend(itertools.repeat(now, ends))
            self.tail.append(payload)
        self.buffer = buffer[pos:]

    def _parse_head(self, head: bytes) -> None:
        lines = head.split(b"\r\n")
        self.status = int(lines[0].split(b" ")[1])
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"x-event-id":
                self.event_id = value.strip().decode()

    def _finish(self) -> None:
        if self.transport is not None:
            self.transport.close()
        if not self.done.done():
            self.done.set_result(None)

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.done.done():
            self.done.set_exception(exc or ConnectionError("the server closed the stream early"))


@dataclass
class StreamResult:
    status: int
    event_id: str
    started: float
    """When the client began opening the stream's connection (perf_counter)."""
    times: list[float]
    tail: bytes
    error: str | None = None


@dataclass
class LevelRun:
    """What the client saw of one level: its streams, and its wall time."""

    streams: list[StreamResult]
    wall_s: float
    client_cpu_s: float


def chat_request(port: int, tokens: int, key: str | None) -> bytes:
    body = json.dumps({
        "model": MODEL,
        "messages": [{"role": "user", "content": "Count to a hundred."}],
        "max_tokens": tokens,
        "stream": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
    }).encode()  # fmt: skip
    auth = b"authorization: Bearer %s\r\n" % key.encode() if key else b""
    return (
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1:%d\r\n"
        b"content-type: application/json\r\naccept: text/event-stream\r\n%s"
        b"content-length: %d\r\n\r\n%s" % (port, auth, len(body), body)
    )


async def _run_level(port: int, streams: int, tokens: int, key: str | None) -> LevelRun:
    loop = asyncio.get_running_loop()
    request = chat_request(port, tokens, key)
    gate = asyncio.Semaphore(CONNECTS_AT_ONCE)

    async def one() -> StreamResult:
        started = time.perf_counter()
        done: asyncio.Future[None] = loop.create_future()
        protocol = _StreamClient(request, done)
        try:
            async with gate:
                await loop.create_connection(lambda: protocol, "127.0.0.1", port)
            await done
        except (OSError, ConnectionError) as exc:
            tail = b"".join(protocol.tail)
            return StreamResult(0, "", started, protocol.times, tail, repr(exc))
        error = None
        if protocol.status != 200:
            error = f"HTTP {protocol.status}: {protocol.error_body[:200]!r}"
        return StreamResult(
            protocol.status,
            protocol.event_id,
            started,
            protocol.times,
            b"".join(protocol.tail),
            error,
        )

    cpu_before = time.process_time()
    started = time.perf_counter()
    results = await asyncio.gather(*(one() for _ in range(streams)))
    ended = max((r.times[-1] for r in results if r.times), default=time.perf_counter())
    return LevelRun(list(results), ended - started, time.process_time() - cpu_before)


def run_level(port: int, streams: int, tokens: int, key: str | None = None) -> LevelRun:
    """Start ``streams`` streamed completions at once against ``127.0.0.1:port``."""
    result: list[LevelRun] = []

    async def main() -> None:
        result.append(await _run_level(port, streams, tokens, key))

    run_loop(main())
    return result[0]


# ---------------------------------------------------------------------------------------
# measures


def stream_problem(stream: StreamResult, tokens: int) -> str | None:
    """Why a stream is not exactly what vLLM sends (role, tokens, usage, [DONE]), or None."""
    if stream.error is not None:
        return stream.error
    if len(stream.times) != tokens + 3:
        return f"{len(stream.times)} events, expected {tokens + 3}"
    events = [e for e in stream.tail.split(b"\n\n") if e.strip()]
    if events[-1].strip() != b"data: [DONE]":
        return f"the last event is {events[-1][:80]!r}, not [DONE]"
    usage = json.loads(events[-2].removeprefix(b"data: "))
    if usage.get("choices") or usage["usage"]["completion_tokens"] != tokens:
        return f"the event before [DONE] is not the usage chunk of {tokens} tokens"
    return None


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process and its live descendants (Linux /proc)."""
    tick = os.sysconf("SC_CLK_TCK")
    children: dict[int, list[int]] = {}
    own = 0.0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(entry.name))
        if int(entry.name) == pid:
            own = (int(fields[11]) + int(fields[12])) / tick
    total, todo = own, list(children.get(pid, []))
    while todo:
        child = todo.pop()
        try:
            fields = Path(f"/proc/{child}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / tick
        todo.extend(children.get(child, []))
    return total


@dataclass
class LevelResult:
    """One arm at one level."""

    streams: int
    events: int
    expected_events: int
    bad_streams: int
    first_problem: str | None
    wall_s: float
    events_per_s: float
    gap_p50_ms: float
    gap_p99_ms: float
    first_event_p50_ms: float
    first_event_p99_ms: float
    """From opening the connection to the first event (the role chunk): queueing shows here
    when the gaps do not."""
    duration_p99_s: float
    """From opening the connection to [DONE]."""
    client_cpu_us_per_event: float
    server_cpu_us_per_event: float | None
    """The relay's or proxy's (all its processes) CPU per event received; None direct."""
    stub_cpu_us_per_event: float
    """The stub's, to show it is not what saturates."""


def summarise(
    run: LevelRun, *, streams: int, tokens: int, server_cpu_s: float | None, stub_cpu_s: float
) -> LevelResult:
    events = sum(len(s.times) for s in run.streams)
    problems = [p for s in run.streams if (p := stream_problem(s, tokens)) is not None]
    gaps = [np.diff(np.asarray(s.times[1 : tokens + 1])) for s in run.streams if len(s.times) > 2]
    all_gaps = np.concatenate(gaps) * 1000 if gaps else np.zeros(1)
    firsts = np.asarray([s.times[0] - s.started for s in run.streams if s.times] or [0.0])
    durations = np.asarray([s.times[-1] - s.started for s in run.streams if s.times] or [0.0])
    return LevelResult(
        streams=streams,
        events=events,
        expected_events=streams * (tokens + 3),
        bad_streams=len(problems),
        first_problem=problems[0] if problems else None,
        wall_s=run.wall_s,
        events_per_s=events / run.wall_s,
        gap_p50_ms=float(np.percentile(all_gaps, 50)),
        gap_p99_ms=float(np.percentile(all_gaps, 99)),
        first_event_p50_ms=float(np.percentile(firsts, 50)) * 1000,
        first_event_p99_ms=float(np.percentile(firsts, 99)) * 1000,
        duration_p99_s=float(np.percentile(durations, 99)),
        client_cpu_us_per_event=1e6 * run.client_cpu_s / max(events, 1),
        server_cpu_us_per_event=None
        if server_cpu_s is None
        else 1e6 * server_cpu_s / max(events, 1),
        stub_cpu_us_per_event=1e6 * stub_cpu_s / max(events, 1),
    )


# ---------------------------------------------------------------------------------------
# processes


def raise_open_files() -> int:
    """Raise this process's open-file limit to the hard limit (children inherit it)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY:
        hard = max(soft, 1 << 20)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return hard


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT)}


@contextmanager
def listening(args: list[str], what: str) -> Iterator[tuple[int, int]]:
    """Start a process that prints ``listening on PORT`` first; yields (pid, port)."""
    process = subprocess.Popen(
        [sys.executable, "-m", *args], cwd=ROOT, env=_env(), stdout=subprocess.PIPE, text=True
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        if not line.startswith("listening on "):
            raise RuntimeError(f"the {what} did not start (printed {line!r})")
        yield process.pid, int(line.split()[-1])
    finally:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def specledger_command() -> list[str]:
    """How to run the CLI: the venv's ``specledger`` script (PYTHONPATH picks this checkout)."""
    script = Path(sys.executable).parent / "specledger"
    if script.exists():
        return [str(script)]
    found = shutil.which("specledger")
    if found:
        return [found]
    return [sys.executable, "-c", "from app.cli import main; main()"]


def proxy_has_workers_option() -> bool:
    """Whether ``specledger proxy`` takes ``--workers`` (the arm is skipped when not)."""
    out = subprocess.run(
        [*specledger_command(), "proxy", "--help"],
        cwd=ROOT,
        env={**_env(), "COLUMNS": "200", "TERM": "dumb", "NO_COLOR": "1"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    return "--workers" in out.stdout


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class ProxyRun:
    """A running proxy: where, its pid, its key, its database, and what was sent to it."""

    process: subprocess.Popen[bytes]
    port: int
    key: str
    db_url: str
    sent: int = 0
    event_ids: list[str] = field(default_factory=list)


@contextmanager
def proxy(stub_port: int, workdir: Path, workers: int) -> Iterator[ProxyRun]:
    """``specledger proxy`` in front of the stub (engine vllm), SQLite, a proxy key; stopped
    with SIGINT (graceful: it writes its records and idle windows out) at the end."""
    workdir.mkdir(parents=True)
    db_url = f"sqlite+pysqlite:///{workdir / 'specledger.db'}"
    migrate.upgrade(db_url)
    database = make_engine(db_url)
    with Session(database) as session, session.begin():
        key = create_key(session, team="bench", admin=False, proxy=ProxyKeyOptions()).secret
    database.dispose()
    port = _free_port()
    replica = f"http://127.0.0.1:{stub_port},engine=vllm,deployment=bench,name={REPLICA}"
    command = [*specledger_command(), "proxy", "--replica", replica, "--port", str(port)]
    command += ["--log-level", "warning"]
    if workers > 1:
        command += ["--workers", str(workers)]
    env = {**_env(), "SPECLEDGER_DATABASE_URL": db_url, "SPECLEDGER_DATA_DIR": str(workdir)}
    log = (workdir / "proxy.log").open("wb")
    process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    run = ProxyRun(process, port, key, db_url)
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(
                    f"the proxy did not start: {(workdir / 'proxy.log').read_text()[-2000:]}"
                )
            time.sleep(0.2)
        yield run
    finally:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(120)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()


@dataclass
class Ledger:
    """What a stopped proxy's database holds against what was sent to it."""

    requests_sent: int
    records: int
    distinct_event_ids: int
    records_matching_sent_ids: int
    records_not_ok: int
    completion_tokens: int
    expected_completion_tokens: int
    metered_once: bool
    wall_ns: int
    request_gpu_ns: int
    idle_gpu_ns: int
    idle_windows: int
    windows_tile: bool
    conserved: bool


def read_ledger(run: ProxyRun, *, tokens_sent: int, gpus: int = 1) -> Ledger:
    database = make_engine(run.db_url)
    with database.connect() as conn:
        rows = conn.execute(
            select(UsageRecord.event_id, UsageRecord.status, UsageRecord.completion_tokens)
        ).all()
        request_gpu_ns = conn.execute(
            select(func.coalesce(func.sum(UsageRecord.gpu_ns), 0)).where(
                UsageRecord.replica == REPLICA
            )
        ).scalar_one()
        windows = conn.execute(
            select(ReplicaIdle.start_at, ReplicaIdle.end_at, ReplicaIdle.gpu_ns)
            .where(ReplicaIdle.replica == REPLICA)
            .order_by(ReplicaIdle.start_at)
        ).all()
    database.dispose()
    ids = [row.event_id for row in rows]
    sent = set(run.event_ids)
    tile = bool(windows) and all(
        before.end_at == after.start_at for before, after in itertools.pairwise(windows)
    )
    # the metered span, first start to last end: windows that overlap (two meters of one
    # replica) or leave gaps cannot balance it
    wall_ns = (
        (max(w.end_at for w in windows) - windows[0].start_at) // ONE_US * 1000 if windows else 0
    )
    idle = sum(int(w.gpu_ns) for w in windows)
    matching = sum(1 for event_id in ids if event_id in sent)
    return Ledger(
        requests_sent=run.sent,
        records=len(rows),
        distinct_event_ids=len(set(ids)),
        records_matching_sent_ids=matching,
        records_not_ok=sum(1 for row in rows if row.status != "ok"),
        completion_tokens=sum(int(row.completion_tokens) for row in rows),
        expected_completion_tokens=tokens_sent,
        metered_once=len(rows) == len(set(ids)) == run.sent == matching == len(sent),
        wall_ns=wall_ns,
        request_gpu_ns=int(request_gpu_ns),
        idle_gpu_ns=idle,
        idle_windows=len(windows),
        windows_tile=tile,
        conserved=tile and int(request_gpu_ns) + idle == gpus * wall_ns,
    )


# ---------------------------------------------------------------------------------------
# the run


@dataclass
class Result:
    """The whole run: per level, per arm; the proxies' ledgers; the targets."""

    config: dict[str, Any]
    levels: dict[int, dict[str, LevelResult | None]]
    ledgers: dict[str, Ledger | None]
    unavailable: dict[str, str]
    targets: list[dict[str, Any]]


def measure(
    *,
    levels: list[int],
    tokens: int,
    interval_ms: float,
    warmup: int,
    workdir: Path,
    proxy_arms: tuple[str, ...] = ARMS[2:],
    rounds: int = 1,
) -> Result:
    """Run every level on every arm (the proxy arms among ``proxy_arms``), the arms in
    turn ``rounds`` times keeping each one's round with the most events/s, then stop the
    proxies and read their ledgers."""
    nofile = raise_open_files()
    config = {
        "streams": levels,
        "tokens": tokens,
        "interval_ms": interval_ms,
        "rounds": rounds,
        "open_files": nofile,
        "cores": os.cpu_count(),
    }
    unavailable: dict[str, str] = {}
    with ExitStack() as stack:
        stub_pid, stub_port = stack.enter_context(
            listening(
                ["bench.stub_upstream", "--interval-ms", str(interval_ms), "--model", MODEL],
                "stub",
            )
        )
        relay_pid, relay_port = stack.enter_context(
            listening(["bench.bare_relay", "--upstream", f"127.0.0.1:{stub_port}"], "relay")
        )
        proxies: dict[str, ProxyRun] = {}
        if "proxy" in proxy_arms:
            proxies["proxy"] = stack.enter_context(
                proxy(stub_port, workdir / "proxy-1w", workers=1)
            )
        if "proxy-2w" in proxy_arms:
            if proxy_has_workers_option():
                proxies["proxy-2w"] = stack.enter_context(
                    proxy(stub_port, workdir / "proxy-2w", workers=2)
                )
            else:
                unavailable["proxy-2w"] = "not available: `specledger proxy` has no --workers"
        config["stub_pid"] = stub_pid

        def level(arm: str, streams: int) -> LevelResult:
            if arm == "direct":
                port, pid, key = stub_port, None, None
            elif arm == "relay":
                port, pid, key = relay_port, relay_pid, None
            else:
                run = proxies[arm]
                port, pid, key = run.port, run.process.pid, run.key
            cpu_before = cpu_seconds(pid) if pid is not None else 0.0
            stub_before = cpu_seconds(stub_pid)
            got = run_level(port, streams, tokens, key)
            stub_cpu = cpu_seconds(stub_pid) - stub_before
            server_cpu = cpu_seconds(pid) - cpu_before if pid is not None else None
            if arm in proxies:
                proxies[arm].sent += streams
                proxies[arm].event_ids += [s.event_id for s in got.streams if s.event_id]
            return summarise(
                got, streams=streams, tokens=tokens, server_cpu_s=server_cpu, stub_cpu_s=stub_cpu
            )

        arms = ["direct", "relay", *proxies]
        for arm in arms:
            level(arm, warmup)
        results: dict[int, dict[str, LevelResult | None]] = {}
        for streams in levels:
            results[streams] = dict.fromkeys(ARMS)
            for arm in itertools.chain.from_iterable(itertools.repeat(arms, rounds)):
                row = level(arm, streams)
                best = results[streams][arm]
                if best is None or row.events_per_s > best.events_per_s:
                    results[streams][arm] = row
                print(
                    f"  {streams:>5} streams  {arm:<9} {row.events_per_s:>9.0f} events/s  "
                    f"p99 gap {row.gap_p99_ms:6.1f} ms",
                    file=sys.stderr,
                )
        # the proxies stop here (the stack unwinds), writing their records out
        stack.close()
        ledgers: dict[str, Ledger | None] = dict.fromkeys(ARMS[2:])
        tokens_sent = {arm: run.sent * tokens for arm, run in proxies.items()}
        for arm, run in proxies.items():
            ledgers[arm] = read_ledger(run, tokens_sent=tokens_sent[arm])
    return Result(config, results, ledgers, unavailable, targets(results, ledgers))


def targets(
    levels: dict[int, dict[str, LevelResult | None]], ledgers: dict[str, Ledger | None]
) -> list[dict[str, Any]]:
    """Issue 28's targets, for each proxy arm (and level where they are per level)."""
    out: list[dict[str, Any]] = []
    for arm in ARMS[2:]:
        ledger = ledgers.get(arm)
        if ledger is None:
            continue
        for streams, row in levels.items():
            proxied, direct, relay = row[arm], row["direct"], row["relay"]
            if proxied is None or direct is None or relay is None:
                continue
            cpu = proxied.server_cpu_us_per_event or 0.0
            relay_cpu = relay.server_cpu_us_per_event or 0.0
            checks = [
                ("CPU/event vs bare relay", _ratio(cpu, relay_cpu), f"<= {CPU_VS_RELAY:g}x",
                 cpu <= CPU_VS_RELAY * relay_cpu),
                ("CPU/event (us)", cpu, f"<= {CPU_US_MAX:g}", cpu <= CPU_US_MAX),
                ("p99 gap vs direct", _ratio(proxied.gap_p99_ms, direct.gap_p99_ms),
                 f"<= {P99_VS_DIRECT:g}x", proxied.gap_p99_ms <= P99_VS_DIRECT * direct.gap_p99_ms),
                ("events/s vs direct", _ratio(proxied.events_per_s, direct.events_per_s),
                 f">= {EVENTS_VS_DIRECT:g}" if streams == TARGET_STREAMS else "(no target)",
                 proxied.events_per_s >= EVENTS_VS_DIRECT * direct.events_per_s
                 if streams == TARGET_STREAMS else None),
                ("every event received", proxied.events / proxied.expected_events, "== 1",
                 proxied.events == proxied.expected_events and proxied.bad_streams == 0),
            ]  # fmt: skip
            for name, value, target, met in checks:
                out.append({"arm": arm, "streams": streams, "check": name, "value": value,
                            "target": target, "met": met})  # fmt: skip
        out.append({"arm": arm, "streams": None, "check": "every request metered once",
                    "value": f"{ledger.records}/{ledger.requests_sent}", "target": "all, once",
                    "met": ledger.metered_once})  # fmt: skip
        out.append({"arm": arm, "streams": None, "check": "GPU-seconds conserved",
                    "value": f"{ledger.request_gpu_ns + ledger.idle_gpu_ns}/{ledger.wall_ns} ns",
                    "target": "requests + idle == GPUs x wall", "met": ledger.conserved})  # fmt: skip
    return out


def _ratio(value: float, reference: float) -> float | None:
    """``value / reference``, or None where the reference is 0 (in a --quick run a relay's
    CPU can stay under one 10 ms clock tick)."""
    return value / reference if reference else None


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def print_table(result: Result) -> None:
    cfg = result.config
    print(
        f"{cfg['tokens']} tokens/stream, one every {cfg['interval_ms']:g} ms, usage on every "
        f"chunk; {cfg['cores']} cores; open files {cfg['open_files']}"
    )
    print(
        f"{'streams':>7}  {'arm':<9} {'events/s':>9} {'x direct':>8} {'gap p50':>7} "
        f"{'gap p99':>7} {'1st p50':>7} {'1st p99':>7} {'dur p99':>7} {'CPU us/ev':>9} {'x relay':>7} {'client us/ev':>12} {'stub us/ev':>10} {'events':>13}"
    )
    for streams, arms in result.levels.items():
        direct, relay = arms["direct"], arms["relay"]
        for arm in ARMS:
            row = arms[arm]
            if row is None:
                if arm in result.unavailable:
                    print(f"{streams:>7}  {arm:<9} {result.unavailable[arm]}")
                continue
            vs_direct = row.events_per_s / direct.events_per_s if direct else None
            vs_relay = None
            if relay and relay.server_cpu_us_per_event and row.server_cpu_us_per_event:
                vs_relay = row.server_cpu_us_per_event / relay.server_cpu_us_per_event
            received = f"{row.events}/{row.expected_events}"
            print(
                f"{streams:>7}  {arm:<9} {row.events_per_s:>9.0f} {_fmt(vs_direct, '.2f'):>8} "
                f"{row.gap_p50_ms:>7.1f} {row.gap_p99_ms:>7.1f} {row.first_event_p50_ms:>7.1f} "
                f"{row.first_event_p99_ms:>7.1f} {row.duration_p99_s:>7.2f} "
                f"{_fmt(row.server_cpu_us_per_event, '.1f'):>9} {_fmt(vs_relay, '.2f'):>7} "
                f"{row.client_cpu_us_per_event:>12.1f} {row.stub_cpu_us_per_event:>10.1f} "
                f"{received:>13}"
                + (f"  ({row.bad_streams} bad: {row.first_problem})" if row.bad_streams else "")
            )
    for arm, ledger in result.ledgers.items():
        if ledger is None:
            continue
        print(
            f"{arm}: {ledger.records} usage records for {ledger.requests_sent} requests "
            f"({ledger.distinct_event_ids} distinct event ids, {ledger.records_matching_sent_ids} "
            f"matching those sent, {ledger.records_not_ok} not ok, {ledger.completion_tokens}/"
            f"{ledger.expected_completion_tokens} tokens); GPU ns: requests "
            f"{ledger.request_gpu_ns} + idle {ledger.idle_gpu_ns} "
            f"({ledger.idle_windows} windows{'' if ledger.windows_tile else ', NOT tiling'}) "
            f"{'==' if ledger.conserved else '!='} wall {ledger.wall_ns}"
        )
    print(
        "gap: between a stream's consecutive token events; 1st / dur: from opening the "
        "connection to the first event / to [DONE]; CPU us/ev: user+sys of the relay's or "
        "proxy's processes per event received (client, stub: their own)"
    )
    print("targets (issue 28):")
    for t in result.targets:
        value = t["value"]
        shown = f"{value:.2f}" if isinstance(value, float) else str(value)
        met = "-" if t["met"] is None else "met" if t["met"] else "NOT MET"
        where = f"{t['streams']:>5} streams" if t["streams"] is not None else " " * 13
        print(f"  {t['arm']:<9} {where}  {t['check']:<26} {shown:>24}  {t['target']:<30} {met}")


def to_json(result: Result) -> dict[str, Any]:
    return {
        "config": result.config,
        "levels": {
            str(streams): {arm: None if row is None else asdict(row) for arm, row in arms.items()}
            for streams, arms in result.levels.items()
        },
        "ledgers": {
            arm: None if ledger is None else asdict(ledger)
            for arm, ledger in result.ledgers.items()
        },
        "unavailable": result.unavailable,
        "targets": result.targets,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--streams", default="200,1000,3000", help="Concurrent streams per level.")
    parser.add_argument("--tokens", type=int, default=64, help="Tokens per stream.")
    parser.add_argument("--interval-ms", type=float, default=20.0, help="Between two tokens.")
    parser.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="Run each level this many times, the arms in turn; each arm's best round is kept "
        "(a shared machine's noise only ever slows a round down).",
    )
    parser.add_argument("--warmup", type=int, default=20, help="Streams per arm before timing.")
    parser.add_argument(
        "--quick", action="store_true", help="20 streams of 16 tokens (for the test)."
    )
    parser.add_argument(
        "--proxy-arms",
        default=",".join(ARMS[2:]),
        help="Which proxy arms to run (proxy: one worker, proxy-2w: --workers 2); direct and "
        "the bare relay always run, as the references.",
    )
    parser.add_argument("--json", action="store_true", help="Print the result as JSON.")
    args = parser.parse_args(argv)
    levels = [int(n) for n in args.streams.split(",") if n.strip()]
    proxy_arms = tuple(arm.strip() for arm in args.proxy_arms.split(",") if arm.strip())
    if unknown := set(proxy_arms) - set(ARMS[2:]):
        parser.error(f"--proxy-arms: unknown {', '.join(sorted(unknown))} (proxy, proxy-2w)")
    tokens, warmup = args.tokens, args.warmup
    if args.quick:
        levels, tokens, warmup = [20], 16, 4
    with tempfile.TemporaryDirectory(prefix="proxy-scale-") as tmp:
        result = measure(
            levels=levels,
            tokens=tokens,
            interval_ms=args.interval_ms,
            warmup=warmup,
            workdir=Path(tmp),
            proxy_arms=proxy_arms,
            rounds=args.rounds,
        )
    if args.json:
        print(json.dumps(to_json(result), indent=2))
    else:
        print_table(result)


if __name__ == "__main__":
    main()
