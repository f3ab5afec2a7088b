"""One set of meters for many proxy processes: the workers of ``specledger proxy --workers N``
and proxies on other hosts (``--meter-url``) in front of the same replicas.

Each replica's GPU time must be split by exactly one :class:`~app.domain.gpu_seconds.ReplicaMeter`.
The process that relays a request sends the meter service its events, in batches, over a
Unix socket or TCP (:class:`MeterClient`): it began (replica, instant), its tokens as
they stream (instant, tokens), it finished (instant, tokens, and its usage record without
GPU time). The service holds events for ``lateness_s`` and feeds them to the meters in
time order, settles the GPU time, and writes the records and each replica's idle time
through its own usage sink and spool, as a single proxy does.

Instants are on one clock: the service's monotonic clock, whose anchor it hands each
client at connection. A client on the same host (same boot id) uses the same
``CLOCK_MONOTONIC`` origin exactly; one on another host maps its own monotonic clock
through the two hosts' wall clocks (which NTP keeps within milliseconds). An event later
than the lateness bound is still metered (a start before the settled frontier is moved to
it), so the split stays conserved either way.

A client that goes away leaves its open requests without records: they end when its
connection drops (plus the lateness) and their GPU time joins the replica's idle time.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import hmac
import itertools
import json
import logging
import os
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from app.domain.usage import UsageEvent
from serving.proxy.state import Clock, ProxyState, ReplicaState

__all__ = ["MeterClient", "MeterService", "boot_id", "open_meter_stream", "serve_meters"]

log = logging.getLogger(__name__)

_LINE_MAX = 1 << 26
"""Longest batch line a client may send (64 MiB: a few hundred thousand events)."""

Event = list[Any]
"""``["b", replica, id, at_ns]``, ``["c", id, at_ns, tokens]`` or
``["f", id, at_ns, tokens, record]`` (the record as its JSONL object)."""


METER_TOKEN_ENV = "SPECLEDGER_METER_TOKEN"
"""The shared secret a proxy presents to a meter service: records sent to the service are
billed to the team they name, so only proxies that hold it may send them."""


def meter_token() -> str | None:
    """The meter token from the environment (None when unset or blank)."""
    return os.environ.get(METER_TOKEN_ENV, "").strip() or None


def boot_id() -> str:
    """This host's boot id: clients with the same one share ``CLOCK_MONOTONIC``."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return f"pid-{os.getpid()}"  # no shared monotonic clock known: map by wall clock


async def open_meter_stream(url: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """Connect to a meter service at ``unix:/path`` or ``tcp://host:port``."""
    if url.startswith("unix:"):
        return await asyncio.open_unix_connection(url.removeprefix("unix:"))
    if url.startswith("tcp://"):
        host, _, port = url.removeprefix("tcp://").rpartition(":")
        return await asyncio.open_connection(host.strip("[]"), int(port))
    raise ValueError(f"meter URL {url!r}: expected unix:/path or tcp://host:port")


# --- the service -------------------------------------------------------------------------------


@dataclass(slots=True)
class _Client:
    id: int
    open: set[str] = field(default_factory=set)


class MeterService:
    """The meters of ``state``'s replicas, fed by clients' events in time order."""

    def __init__(self, state: ProxyState, *, lateness_s: float, token: str | None = None) -> None:
        self.state = state
        self.token = token
        """Every client must present it in its hello (None: any client on the socket)."""
        self.lateness_ns = int(lateness_s * 1e9)
        self.replicas = {replica.spec.replica_name: replica for replica in state.replicas}
        self._held: list[tuple[int, int, _Client, Event]] = []
        self._seq = itertools.count()
        self._owner: dict[str, tuple[ReplicaState, _Client]] = {}
        self._gone: list[tuple[int, _Client]] = []
        self.events = 0
        self.clients_seen = 0
        self.writers: set[asyncio.StreamWriter] = set()
        """The clients' open connections."""

    def hello(self) -> dict[str, Any]:
        clock = self.state.clock
        return {
            "boot_id": boot_id(),
            "anchor_mono_ns": clock.anchor_ns,
            "anchor_at": clock.anchor_at.isoformat(),
        }

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """One client's connection: its hello, then batches of events, one JSON list a line."""
        self.clients_seen += 1
        client = _Client(id=self.clients_seen)
        self.writers.add(writer)
        try:
            greeting = await reader.readline()
            if not greeting:
                return
            if not self._admits(json.loads(greeting)):
                log.warning("meter client %d refused: wrong or missing meter token", client.id)
                return
            writer.write(json.dumps(self.hello()).encode() + b"\n")
            await writer.drain()
            while line := await reader.readline():
                self.hold(json.loads(line), client)
        except (ConnectionError, ValueError) as exc:
            log.warning("meter client %d: %s", client.id, exc)
        finally:
            self._gone.append((self.state.clock.now_ns(), client))
            self.writers.discard(writer)
            writer.close()

    def _admits(self, greeting: Any) -> bool:
        if self.token is None:
            return True
        presented = greeting.get("token") if isinstance(greeting, dict) else None
        return isinstance(presented, str) and hmac.compare_digest(
            presented.encode(), self.token.encode()
        )

    def hold(self, events: Sequence[Event], client: _Client) -> None:
        """Queue a batch until the lateness bound has passed over it."""
        for event in events:
            at_ns = int(event[3] if event[0] == "b" else event[2])
            heapq.heappush(self._held, (at_ns, next(self._seq), client, event))

    def pump(self, *, until_ns: int | None = None) -> None:
        """Feed the meters every held event up to ``until_ns`` (default: now minus the
        lateness bound), oldest first; end the requests of clients gone by then."""
        if until_ns is None:
            until_ns = self.state.clock.now_ns() - self.lateness_ns
        held = self._held
        while held and held[0][0] <= until_ns:
            _, _, client, event = heapq.heappop(held)
            self._apply(event, client)
        while self._gone and self._gone[0][0] <= until_ns:
            at_ns, client = self._gone.pop(0)
            for event_id in list(client.open):
                owner = self._owner.pop(event_id, None)
                if owner is not None:
                    log.warning("request %s: its proxy went away before it finished", event_id)
                    self.state.abandon(owner[0], event_id, at_ns=at_ns)

    def _apply(self, event: Event, client: _Client) -> None:
        self.events += 1
        kind = event[0]
        try:
            if kind == "c":
                owner = self._owner.get(event[1])
                if owner is not None:
                    self.state.apply_chunk(owner[0], event[1], at_ns=event[2], tokens=event[3])
            elif kind == "b":
                replica = self.replicas.get(event[1])
                if replica is None:
                    log.error("meter event for unknown replica %r", event[1])
                    return
                self.state.apply_begin(replica, event[2], at_ns=event[3])
                self._owner[event[2]] = (replica, client)
                client.open.add(event[2])
            elif kind == "f":
                owner = self._owner.pop(event[1], None)
                if owner is None:
                    return
                owner[1].open.discard(event[1])
                record = _usage_record(event[4])
                self.state.apply_finish(owner[0], record, at_ns=event[2], tokens=event[3])
        except Exception:  # one bad event must not stop the meters
            log.exception("meter event %r failed", event[:4])


def _usage_record(obj: Any) -> UsageEvent:
    from app.usage.schemas import record_from_json

    record = record_from_json(obj)
    if not isinstance(record, UsageEvent):
        raise ValueError("a finish event must carry a usage record")
    return record


async def serve_meters(
    service: MeterService,
    listen: Sequence[str],
    *,
    stop: asyncio.Event,
    on_tick: Callable[[], Awaitable[None]] | None = None,
    pump_interval_s: float = 0.02,
) -> None:
    """Serve ``service`` on each ``unix:/path`` / ``tcp://host:port`` of ``listen`` until
    ``stop`` is set; then feed every held event and close the meters' windows."""
    servers: list[asyncio.AbstractServer] = []
    for url in listen:
        if url.startswith("unix:"):
            path = url.removeprefix("unix:")
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
            servers.append(await asyncio.start_unix_server(service.handle, path, limit=_LINE_MAX))
            os.chmod(path, 0o600)  # only this user's proxies
        elif url.startswith("tcp://"):
            if service.token is None:
                raise ValueError(f"meter address {url!r}: TCP needs {METER_TOKEN_ENV} set")
            host, _, port = url.removeprefix("tcp://").rpartition(":")
            servers.append(
                await asyncio.start_server(
                    service.handle, host.strip("[]"), int(port), limit=_LINE_MAX
                )
            )
        else:
            raise ValueError(f"meter address {url!r}: expected unix:/path or tcp://host:port")
    state = service.state
    state.lag_ns = service.lateness_ns
    next_tick = time.monotonic() + state.config.tick_interval_s
    try:
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), pump_interval_s)
            service.pump()
            if time.monotonic() >= next_tick:
                next_tick += state.config.tick_interval_s
                try:
                    state.tick()
                except Exception:
                    log.exception("metering tick failed")
                if on_tick is not None:
                    await on_tick()
    finally:
        for server in servers:
            server.close()
        # Clients are told to finish first (the workers stop before the service), so what
        # they sent is all there is: meter it, then close every window at now.
        service.pump(until_ns=2**62)
        state.lag_ns = 0
        for replica in state.replicas:
            state.close_window(replica, reopen=False)


# --- the client --------------------------------------------------------------------------------


class MeterClient:
    """A proxy's link to a meter service: events are batched and sent every
    ``flush_interval_s`` (one line per batch)."""

    def __init__(
        self, url: str, *, flush_interval_s: float = 0.02, token: str | None = None
    ) -> None:
        self.url = url
        self.token = token
        self.flush_interval_s = flush_interval_s
        self._batch: list[Event] = []
        self._writer: asyncio.StreamWriter | None = None
        self._task: asyncio.Task[None] | None = None
        self.sent = 0

    async def connect(self, *, attempts: int = 100) -> Clock:
        """Connect (retrying while the service starts) and return the service's clock."""
        hello = await self._open(attempts=attempts)
        self._task = asyncio.create_task(self._flush_forever())
        anchor_at = datetime.fromisoformat(hello["anchor_at"])
        if hello["boot_id"] == boot_id():
            return Clock(anchor_ns=int(hello["anchor_mono_ns"]), anchor_at=anchor_at)
        # Another host: its monotonic origin means nothing here; map through wall clocks.
        since_anchor_ns = time.time_ns() - int(anchor_at.timestamp() * 1e9)
        return Clock(
            anchor_ns=time.monotonic_ns() - since_anchor_ns,
            anchor_at=anchor_at.astimezone(UTC) + timedelta(0),
        )

    async def _open(self, *, attempts: int) -> dict[str, Any]:
        for attempt in range(attempts):
            try:
                reader, writer = await open_meter_stream(self.url)
                break
            except OSError:
                if attempt == attempts - 1:
                    raise
                await asyncio.sleep(0.1)
        greeting: dict[str, Any] = {"hello": 1, "pid": os.getpid()}
        if self.token is not None:
            greeting["token"] = self.token
        writer.write(json.dumps(greeting).encode() + b"\n")
        await writer.drain()
        answer = await reader.readline()
        if not answer:
            writer.close()
            raise ConnectionRefusedError(
                f"the meter service at {self.url} closed the connection: is {METER_TOKEN_ENV} "
                "the same as the service's?"
            )
        hello: dict[str, Any] = json.loads(answer)
        self._writer = writer
        return hello

    def begin(self, replica: str, event_id: str, *, at_ns: int) -> None:
        self._batch.append(["b", replica, event_id, at_ns])

    def chunk(self, event_id: str, *, at_ns: int, tokens: int) -> None:
        self._batch.append(["c", event_id, at_ns, tokens])

    def finish(self, event: UsageEvent, *, at_ns: int, tokens: int) -> None:
        self._batch.append(["f", event.event_id, at_ns, tokens, event.to_json()])

    async def flush(self) -> None:
        if not self._batch or self._writer is None:
            return
        batch, self._batch = self._batch, []
        self._writer.write(json.dumps(batch, separators=(",", ":")).encode() + b"\n")
        self.sent += len(batch)
        await self._writer.drain()

    async def _flush_forever(self) -> None:
        while True:
            await asyncio.sleep(self.flush_interval_s)
            try:
                await self.flush()
            except (ConnectionError, OSError) as exc:
                # The service ended this connection's open requests; what they still send
                # is dropped there. Requests that begin from now on are metered again once
                # it is back.
                log.error("the meter service at %s went away (%s); reconnecting", self.url, exc)
                self._writer = None
                while self._writer is None:
                    try:
                        await self._open(attempts=1)
                    except (OSError, ValueError):
                        await asyncio.sleep(1.0)
                log.warning("reconnected to the meter service at %s", self.url)

    async def aclose(self) -> None:
        """Send what is left and close the connection."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        with contextlib.suppress(ConnectionError):
            await self.flush()
        if self._writer is not None:
            self._writer.close()
            with contextlib.suppress(ConnectionError):
                await self._writer.wait_closed()
            self._writer = None
