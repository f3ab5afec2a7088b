"""Configuration of the metering proxy: the replicas behind it, storage and timeouts."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Annotated

import httpx
from pydantic import BaseModel, ConfigDict, Field, PositiveInt, model_validator

from app.domain.speculation_methods import EngineKind
from serving.engine.config import EngineConfig
from serving.engines import SpecSource, adapter_for

__all__ = ["ProxyConfig", "ReplicaSpec"]


class ReplicaSpec(BaseModel):
    """One OpenAI-compatible inference server behind the proxy."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    engine: EngineKind = EngineKind.vllm
    """Which engine answers (:mod:`serving.engines`): it decides the health path, the stream
    options asked for, and where drafted and accepted tokens come from."""
    url: str
    """Root URL of the server, e.g. ``http://127.0.0.1:8100`` (a trailing ``/v1`` is dropped)."""
    deployment: str = Field("default", max_length=128)
    name: str | None = Field(None, max_length=128)
    """Replica name in usage records; default: ``host:port`` of the URL."""
    gpus: PositiveInt = 1
    """GPUs of the replica: its capacity is ``gpus`` GPU-seconds per second."""
    spec_method: str = Field("none", max_length=32)
    spec_k: int | None = None
    model: str | None = None
    """Served model name; when set, only requests for it are routed here."""

    @property
    def base_url(self) -> str:
        """The URL without a trailing slash or ``/v1``."""
        return self.url.rstrip("/").removesuffix("/v1")

    @functools.cached_property
    def replica_name(self) -> str:
        """The name usage records give the replica."""
        return self.name or httpx.URL(self.base_url).netloc.decode()

    @classmethod
    def from_engine(
        cls, config: EngineConfig, *, gpus: int = 1, deployment: str | None = None
    ) -> ReplicaSpec:
        """The replica started from a launcher config (its engine, URL, speculation and
        model; the method as the engine names it)."""
        method, k = adapter_for(config.engine).spec_method(config)
        return cls(
            engine=EngineKind(config.engine),
            url=config.base_url,
            deployment=deployment or config.name,
            gpus=gpus,
            spec_method=method,
            spec_k=k if isinstance(k, int) else None,
            model=config.model_name,
        )


class ProxyConfig(BaseModel):
    """Everything the proxy needs; the CLI builds it from options and settings."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    replicas: Annotated[tuple[ReplicaSpec, ...], Field(min_length=1)]
    database_url: str | None = None
    """Where usage records go; None writes only the JSONL log."""
    jsonl_path: Path | None = None
    spill_path: Path | None = None
    spool_dir: Path | None = None
    """The usage sink's durable spool (serving.proxy.spool); None keeps its backlog in
    memory."""
    store_uri: str | None = None
    """Parquet store (folder or ``s3://bucket/prefix``) for hourly usage files, instead of
    the database."""
    s3_endpoint_url: str | None = None
    """For records the database refused until shutdown, when there is no JSONL log."""
    connect_timeout_s: float = 5.0
    read_timeout_s: float = 600.0
    """Longest wait for a response, or between two chunks of a stream."""
    max_connections: PositiveInt = 1000
    tick_interval_s: float = 1.0
    """How often the meters are cut, so records settle while requests are quiet."""
    meter_batch_s: float = Field(0.1, ge=0)
    """A streamed request's chunks are reported to its replica's meter at most this often
    (together, at the instant of the last; every tick reports what is held): the
    resolution of the GPU-time split, traded for the meter's cost per chunk. 0 reports
    every chunk."""
    idle_window_s: float = 300.0
    """A metering window closes (idle time written) at the first idle tick after this."""
    sink_batch_size: PositiveInt = 500
    sink_flush_interval_s: float = 0.25
    allow_anonymous: bool = False
    """Serve requests that present no proxy key, billed to team ``(unattributed)`` (for the
    embedded demo). A key that is presented is still checked."""
    key_refresh_s: float = Field(0.5, gt=0)
    """How often the proxy checks the database for created or revoked keys (and so the
    longest a revoked key still works)."""
    counter_check_s: float = Field(15.0, gt=0)
    """How often each replica's spec-decode counters are checked against the metered sums."""
    iteration_poll_s: float = Field(1.0, gt=0)
    """How often TensorRT-LLM replicas' iteration stats are drained (their queue empties on
    each read; the drain times place the iterations on the meter's clock)."""
    iteration_wait_s: float = Field(30.0, gt=0)
    """Longest a finished request on a TensorRT-LLM replica waits for the iteration stats
    covering it before its record is written with the figures drained so far."""
    budget_refresh_s: float = Field(5.0, gt=0)
    """How often spend against hard budget limits is read from the database (between two
    reads each request reserves its expected cost: :mod:`serving.proxy.budget_guard`)."""
    budget_settle_lag_s: float = Field(2.0, gt=0)
    """A refresh counts the metered usage that finished this long before it; the proxy
    counts what finished since itself. Longer than the usage sink takes to write a record
    (``sink_flush_interval_s``, or the meter service's lateness plus its flush)."""
    budget_shares: PositiveInt = 1
    """How many proxy processes admit requests against the same budgets (workers on every
    host): each admits against this share of what a budget has left at its refresh.
    ``specledger proxy --workers N`` makes it N on one host."""
    reserve_max_tokens: PositiveInt = 1024
    """The output tokens reserved for a request that sets no ``max_tokens``."""
    speculate_up_to: PositiveInt | None = None
    """Route by load: while at most this many requests are in flight (the new one included),
    new requests go to speculating replicas, above it to plain ones. The schedule done by
    routing, for engines whose k=0 path still costs (a drafter kept at k=0 is not free).
    None: every request goes to the replica with the fewest in flight."""

    meter_url: str | None = None
    """A meter service (``unix:/path`` or ``tcp://host:port``,
    :mod:`serving.proxy.meter_service`) that meters this proxy's requests and writes their
    records, shared with other proxy processes in front of the same replicas; None: this
    proxy runs its own meters and sink."""
    meter_lateness_s: float = Field(0.25, gt=0)
    """How long a meter service holds events before metering them in time order (longer
    than a client's flush interval plus the network's delay)."""

    @property
    def meter_batch_ns(self) -> int:
        return int(self.meter_batch_s * 1e9)

    @model_validator(mode="after")
    def _keys_need_the_database(self) -> ProxyConfig:
        if not self.allow_anonymous and self.database_url is None:
            raise ValueError(
                "the proxy checks proxy keys against the database: give it a database, or "
                "allow anonymous requests (--allow-anonymous)"
            )
        return self

    @model_validator(mode="after")
    def _shared_meters_take_token_counts(self) -> ProxyConfig:
        if self.meter_url is not None and any(
            adapter_for(r.engine).spec_source is SpecSource.iteration_stats for r in self.replicas
        ):
            raise ValueError(
                "a shared meter service (several workers or hosts) does not yet drain "
                "TensorRT-LLM's iteration stats: run one proxy process for those replicas"
            )
        return self

    @model_validator(mode="after")
    def _routing_needs_both_kinds(self) -> ProxyConfig:
        if self.speculate_up_to is not None:
            kinds = {replica.spec_method != "none" for replica in self.replicas}
            if kinds != {True, False}:
                raise ValueError(
                    "speculate_up_to (routing by load) needs at least one "
                    "speculating and one plain (spec=none) replica"
                )
        return self
