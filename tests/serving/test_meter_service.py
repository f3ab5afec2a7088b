"""The meter service splits a replica's GPU time as one meter fed every event in time
order would, however the events of several proxies interleave on the way (each proxy's own
in order, as it sends them), and the split stays conserved: Σ requests + idle == GPUs x
wall. A property test over the service's own path: events through ``MeterService.hold`` and
``pump``, records and idle time out through a real usage sink (JSONL)."""

import asyncio
import json
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.domain.gpu_seconds import EventKind, MeterEvent, ReplicaMeter, meter_events
from app.domain.usage import UsageEvent
from serving.proxy.config import ProxyConfig, ReplicaSpec
from serving.proxy.meter_service import MeterClient, MeterService, _Client
from serving.proxy.metrics import ProxyMetrics
from serving.proxy.sink import UsageSink
from serving.proxy.state import Clock, ProxyState, ReplicaState

GPUS = 2
MS = 1_000_000


@st.composite
def plans(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Requests on distinct instants (ms after the window opens): which proxy relayed each,
    when it began, its chunks (instant, tokens), when it finished and its last tokens."""
    count = draw(st.integers(1, 8))
    instants = draw(
        st.lists(st.integers(1, 400), min_size=count * 4, max_size=count * 4, unique=True)
    )
    requests = []
    for i in range(count):
        begin, *chunk_at, finish = sorted(instants[i * 4 : i * 4 + 4])
        chunks = [(at, draw(st.integers(0, 9))) for at in chunk_at[: draw(st.integers(0, 2))]]
        requests.append({"id": f"r{i}", "client": draw(st.integers(0, 2)), "begin": begin,
                         "chunks": chunks, "finish": finish, "tokens": draw(st.integers(0, 5))})  # fmt: skip
    return requests


def _record(event_id: str, clock: Clock, begin_ms: int, finish_ms: int) -> dict[str, Any]:
    return UsageEvent(
        event_id=event_id, session_id="s", team="t", cost_center=None, tags={},
        deployment="d", replica="a", model="m", endpoint="completions", streamed=True,
        spec_method="none", spec_k=None, arrived_at=clock.at(begin_ms * MS),
        first_token_at=None, finished_at=clock.at(finish_ms * MS),
    ).to_json()  # fmt: skip


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(plans(), st.randoms(use_true_random=False))
def test_interleaved_proxies_split_gpu_time_as_one_meter_in_time_order(
    tmp_path: Path, requests: list[dict[str, Any]], rng: Any
) -> None:
    config = ProxyConfig(replicas=(ReplicaSpec(url="http://a:1", name="a", deployment="d",
                                               gpus=GPUS),), allow_anonymous=True)  # fmt: skip
    clock = Clock(anchor_ns=0, anchor_at=datetime(2026, 12, 6, tzinfo=UTC))
    log = tmp_path / f"usage-{uuid.uuid4().hex}.jsonl"  # one per example
    sink = UsageSink(engine=None, jsonl_path=log, flush_interval_s=0.01)
    sink.start()
    replica = ReplicaState(spec=config.replicas[0], meter=ReplicaMeter(gpus=GPUS, start_ns=0))
    state = ProxyState(config=config, client=None, metrics=ProxyMetrics(), sink=sink,  # type: ignore[arg-type]
                       clock=clock, replicas=[replica])  # fmt: skip
    service = MeterService(state, lateness_s=1.0)
    clients = [_Client(id=i) for i in range(3)]
    sent: list[list[tuple[int, list[Any]]]] = [[] for _ in clients]
    for r in requests:
        own = sent[r["client"]]
        own.append((r["begin"], ["b", "a", r["id"], r["begin"] * MS]))
        own += [(at, ["c", r["id"], at * MS, tokens]) for at, tokens in r["chunks"]]
        own.append((r["finish"], ["f", r["id"], r["finish"] * MS, r["tokens"],
                                  _record(r["id"], clock, r["begin"], r["finish"])]))  # fmt: skip
    queues = [[event for _, event in sorted(own, key=lambda pair: pair[0])] for own in sent]
    while any(queues):  # batches of each proxy, in its order, the proxies interleaved
        i = rng.choice([i for i, queue in enumerate(queues) if queue])
        size = rng.randint(1, len(queues[i]))
        batch, queues[i] = queues[i][:size], queues[i][size:]
        service.hold(batch, clients[i])
        service.pump(until_ns=rng.randint(-2000, 0) * MS)  # the lateness bound: nothing yet
    service.pump(until_ns=2**62)
    state.close_window(state.replicas[0], reopen=False)
    sink.close()

    written = [json.loads(line) for line in log.read_text().splitlines()]
    shares = {row["event_id"]: row["gpu_ns"] for row in written if row["record"] == "usage"}
    (idle,) = [row for row in written if row["record"] == "replica_idle"]
    in_order = sorted(
        [MeterEvent(EventKind.start, r["id"], r["begin"] * MS) for r in requests]
        + [
            MeterEvent(EventKind.chunk, r["id"], at * MS, t)
            for r in requests
            for at, t in r["chunks"]
        ]
        + [MeterEvent(EventKind.finish, r["id"], r["finish"] * MS, r["tokens"]) for r in requests],
        key=lambda event: event.at_ns,
    )
    reference = meter_events(in_order, gpus=GPUS, start_ns=0, end_ns=1000 * MS)
    assert shares == reference.request_gpu_ns
    start = datetime.fromisoformat(idle["start_at"])
    end = datetime.fromisoformat(idle["end_at"])
    wall_ns = (end - start) // timedelta(microseconds=1) * 1000
    assert sum(shares.values()) + idle["gpu_ns"] == GPUS * wall_ns


def _service(tmp_path: Path) -> tuple[MeterService, ProxyState, UsageSink, Path]:
    config = ProxyConfig(replicas=(ReplicaSpec(url="http://a:1", name="a", deployment="d",
                                               gpus=GPUS),), allow_anonymous=True)  # fmt: skip
    log = tmp_path / f"usage-{uuid.uuid4().hex}.jsonl"
    sink = UsageSink(engine=None, jsonl_path=log, flush_interval_s=0.01)
    sink.start()
    clock = Clock()
    replica = ReplicaState(spec=config.replicas[0], meter=ReplicaMeter(gpus=GPUS, start_ns=0))
    state = ProxyState(config=config, client=None, metrics=ProxyMetrics(), sink=sink,  # type: ignore[arg-type]
                       clock=clock, replicas=[replica])  # fmt: skip
    return MeterService(state, lateness_s=0.01), state, sink, log


def test_a_proxy_reconnects_to_a_meter_service_that_came_back(tmp_path: Path) -> None:
    """Requests that begin after the service is back are metered; the one in flight across
    the outage has no record, and its GPU time stays in the window (conserved)."""
    service, state, sink, log = _service(tmp_path)

    async def main() -> None:
        server = await asyncio.start_server(service.handle, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        client = MeterClient(f"tcp://127.0.0.1:{port}", flush_interval_s=0.01)
        clock = await client.connect()
        now = clock.now_ns
        client.begin("a", "before", at_ns=now())
        client.begin("a", "across", at_ns=now())
        client.finish(_event("before", clock), at_ns=now(), tokens=3)
        await asyncio.sleep(0.1)
        server.close()
        await server.wait_closed()
        for writer in list(service.writers):
            writer.close()
        await asyncio.sleep(0.2)
        service.pump(until_ns=2**62)
        server = await asyncio.start_server(service.handle, "127.0.0.1", port)
        deadline = time.monotonic() + 10
        while service.clients_seen < 2:  # the client notices on a flush and reconnects
            client.chunk("across", at_ns=now(), tokens=1)
            assert time.monotonic() < deadline, "the client did not reconnect"
            await asyncio.sleep(0.05)
        client.begin("a", "after", at_ns=now())
        client.finish(_event("after", clock), at_ns=now(), tokens=2)
        client.finish(_event("across", clock), at_ns=now(), tokens=2)
        await client.aclose()
        await asyncio.sleep(0.2)
        server.close()
        await server.wait_closed()

    asyncio.run(main())
    service.pump(until_ns=2**62)
    state.close_window(state.replicas[0], reopen=False)
    sink.close()
    written = [json.loads(line) for line in log.read_text().splitlines()]
    usage = {row["event_id"]: row["gpu_ns"] for row in written if row["record"] == "usage"}
    (idle,) = [row for row in written if row["record"] == "replica_idle"]
    assert set(usage) == {"before", "after"}
    wall_ns = (
        (datetime.fromisoformat(idle["end_at"]) - datetime.fromisoformat(idle["start_at"]))
        // timedelta(microseconds=1)
        * 1000
    )
    assert sum(usage.values()) + idle["gpu_ns"] == GPUS * wall_ns


def _event(event_id: str, clock: Clock) -> UsageEvent:
    at = clock.at(clock.now_ns())
    return UsageEvent(
        event_id=event_id, session_id="s", team="t", cost_center=None, tags={},
        deployment="d", replica="a", model="m", endpoint="completions", streamed=True,
        spec_method="none", spec_k=None, arrived_at=at, first_token_at=None, finished_at=at,
    )  # fmt: skip


def test_a_meter_service_with_a_token_refuses_clients_without_it(tmp_path: Path) -> None:
    """The records a client sends decide who pays: a client with a wrong or no token is
    disconnected before it can send any, and one with the token is served."""
    service, _state, sink, _log = _service(tmp_path)
    secret = "s3cret-" + uuid.uuid4().hex
    service.token = secret

    async def main() -> list[str]:
        server = await asyncio.start_server(service.handle, "127.0.0.1", 0)
        url = f"tcp://127.0.0.1:{server.sockets[0].getsockname()[1]}"
        outcomes = []
        for token in (None, "wrong", secret):
            client = MeterClient(url, flush_interval_s=0.01, token=token)
            try:
                await client.connect(attempts=1)
            except ConnectionRefusedError as exc:
                outcomes.append("refused" if secret not in str(exc) else "refused, naming it")
            else:
                outcomes.append("served")
                await client.aclose()
        server.close()
        await server.wait_closed()
        return outcomes

    try:
        assert asyncio.run(main()) == ["refused", "refused", "served"]
    finally:
        sink.close()
