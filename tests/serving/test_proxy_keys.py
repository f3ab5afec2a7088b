"""Proxy keys through the real proxy (fake vLLM, SQLite and PostgreSQL): the key decides who
pays; a missing, wrong or revoked key is a 401 that is counted and not recorded."""

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import Engine
from sqlalchemy.orm import Session

from app.auth.service import create_key, revoke_key
from app.domain.attribution import KEY_TAG, UNATTRIBUTED, VIA_TAG
from serving.proxy.app import ProxyConfig, ReplicaSpec, create_proxy_app
from tests.serving.fake_vllm import FakeVllm
from tests.serving.proxy_helpers import bearer, proxy_key, serve, usage_rows

REPLICA = ReplicaSpec(url="http://fake:8000", deployment="smol", name="a", gpus=1)
BODY = {"model": "fake-model", "prompt": "hello there", "max_tokens": 5}
REJECTED = 'specledger_proxy_rejected_requests_total{{code="{code}"}} {n}.0'


class _SeenHeaders:
    """The fake vLLM behind a transport that keeps the headers each request arrived with."""

    def __init__(self) -> None:
        self.fake = FakeVllm()
        self.headers: list[httpx.Headers] = []

    async def handle(self, request: httpx.Request) -> httpx.Response:
        self.headers.append(request.headers)
        return await self.fake.handle(request)


@pytest.fixture
def upstream() -> _SeenHeaders:
    return _SeenHeaders()


def _proxy(upstream: _SeenHeaders, db_url: str | None, **options: Any) -> FastAPI:
    config = ProxyConfig(
        replicas=(REPLICA, ReplicaSpec(url="http://fake:8001", deployment="big", name="b")),
        database_url=db_url,
        tick_interval_s=0.05,
        sink_flush_interval_s=0.05,
        key_refresh_s=0.1,
        **options,
    )
    return create_proxy_app(config, transport=httpx.MockTransport(upstream.handle))


@pytest.fixture
def client(upstream: _SeenHeaders, db_url: str, engine: Engine) -> Iterator[httpx.Client]:
    with serve(_proxy(upstream, db_url)) as base, httpx.Client(base_url=base, timeout=30) as c:
        yield c


def _post(client: httpx.Client, headers: dict[str, str]) -> httpx.Response:
    return client.post("/v1/completions", json=BODY, headers=headers)


def test_missing_wrong_and_api_keys_are_401s_counted_and_not_recorded(client, engine):
    with Session(engine) as session, session.begin():
        api_key = create_key(session, team="search", admin=False).secret
    attempts = [
        {},
        {"X-Team": "search"},
        bearer("slk_" + "x" * 43),
        bearer(api_key),  # an API key reads the REST API; it does not bill at the proxy
        {"X-API-Key": "not-a-key"},
    ]
    for headers in attempts:
        response = _post(client, headers)
        assert response.status_code == 401, headers
        error = response.json()["error"]
        assert set(error) == {"message", "type", "param", "code"}
        assert error["code"] == "invalid_api_key"
        assert "slk_" not in error["message"].replace("`Authorization: Bearer <key>`", "")
    assert client.get("/v1/models").status_code == 401
    metrics = client.get("/metrics").text
    assert REJECTED.format(code="invalid_api_key", n=len(attempts) + 1) in metrics
    time.sleep(0.2)
    assert usage_rows(engine) == []


def test_the_key_decides_the_team_and_is_never_sent_upstream(client, engine, upstream):
    key = proxy_key(engine, "search", cost_center="cc-7", tags={"app": "rag"})
    response = _post(client, bearer(key, X_Session_Id="s1", X_Tags="env=prod", X_Team="search"))
    assert response.status_code == 200, response.text
    forbidden = _post(client, bearer(key, X_Team="ads"))
    assert forbidden.status_code == 403
    assert forbidden.json()["error"]["code"] == "permission_denied"
    assert all("authorization" not in h and "x-api-key" not in h for h in upstream.headers)
    time.sleep(0.3)
    (row,) = usage_rows(engine)
    assert (row["team"], row["cost_center"], row["session_id"]) == ("search", "cc-7", "s1")
    assert row["tags"]["env"] == "prod"
    assert row["tags"]["app"] == "rag"
    assert row["tags"][VIA_TAG] == "key"
    assert row["tags"][KEY_TAG].isdigit()


def test_a_gateway_key_passes_its_users_team_on(client, engine):
    key = proxy_key(engine, "platform", gateway=True)
    assert _post(client, bearer(key, X_Team="ads")).status_code == 200
    assert _post(client, bearer(key)).status_code == 200
    time.sleep(0.3)
    via = sorted((row["team"], row["tags"][VIA_TAG]) for row in usage_rows(engine))
    assert via == [("ads", "gateway"), ("platform", "key")]


def test_a_key_only_reaches_its_deployments(client, engine):
    key = proxy_key(engine, "search", deployments=("big",))
    for _ in range(3):
        assert _post(client, bearer(key)).status_code == 200
    time.sleep(0.3)
    assert {row["deployment"] for row in usage_rows(engine)} == {"big"}
    only_smol = proxy_key(engine, "search", deployments=("nowhere",))
    denied = _post(client, bearer(only_smol))
    assert denied.status_code == 403
    assert "may not use" in denied.json()["error"]["message"]


def test_new_keys_work_at_once_and_revoked_ones_stop_within_the_refresh(client, engine):
    key = proxy_key(engine, "search")  # created while the proxy runs
    assert _post(client, bearer(key)).status_code == 200
    with Session(engine) as session, session.begin():
        revoke_key(session, key[:12])
    revoked_at = time.monotonic()
    while _post(client, bearer(key)).status_code == 200:
        assert time.monotonic() - revoked_at < 5, "a revoked key still works"
        time.sleep(0.02)
    assert _post(client, bearer(key)).status_code == 401


def test_anonymous_use_is_unattributed_and_a_presented_key_is_still_checked(upstream, tmp_path):
    log = tmp_path / "usage.jsonl"
    app = _proxy(upstream, None, allow_anonymous=True, jsonl_path=log)
    with serve(app) as base, httpx.Client(base_url=base, timeout=30) as client:
        assert _post(client, {"Authorization": "Bearer EMPTY"}).status_code == 200
        assert _post(client, {"X-Team": "search"}).status_code == 401
        assert _post(client, bearer("slk_" + "y" * 43)).status_code == 401
    # a credential that is not a SpecLedger key passes through: it may be the model server's
    assert upstream.headers[0]["authorization"] == "Bearer EMPTY"
    assert f'"team":"{UNATTRIBUTED}"' in log.read_text()


def test_tags_that_keys_set_cannot_come_from_a_header(client, engine):
    rag = proxy_key(engine, "search", tags={"app": "rag"})
    other = proxy_key(engine, "ads")
    assert _post(client, bearer(rag, X_Tags="app=rag,env=x")).status_code == 200
    refused = _post(client, bearer(other, X_Tags="app=rag"))
    assert refused.status_code == 403
    assert "set by proxy keys" in refused.json()["error"]["message"]
    assert _post(client, bearer(other, X_Tags="env=x")).status_code == 200


def test_two_different_credentials_are_refused_and_no_key_form_goes_upstream(
    client, engine, upstream
):
    key, other = proxy_key(engine, "search"), proxy_key(engine, "ads")
    both = _post(client, {"Authorization": f"Bearer {key}", "X-API-Key": other})
    assert both.status_code == 401
    odd = {"Authorization": f"Bearer {key}", "X-API-Key": key, "X-Other": "x"}
    assert _post(client, odd).status_code == 200
    assert all("slk_" not in value for h in upstream.headers for value in h.values())


def test_models_lists_only_what_the_key_may_use(client, engine, upstream):
    nowhere = proxy_key(engine, "search", deployments=("nowhere",))
    listed = client.get("/v1/models", headers=bearer(nowhere))
    assert (listed.status_code, listed.json()["data"]) == (200, [])
    anywhere = client.get("/v1/models", headers=bearer(proxy_key(engine, "search")))
    assert [m["id"] for m in anywhere.json()["data"]] == ["fake-model"]
