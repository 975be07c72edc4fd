"""``GET /v1/audit/events`` (:mod:`gateway.decisionlog.export`) on a live gateway, and the decision-log gauges.

Tenant scoping by token: a tenant token reads its tenant only, an org-admin token reads all;
windows, filters, resuming with ``after``, errors. The gauges are the observer's
``hookbus_decision_log_length``, ``hookbus_decision_log_age_seconds`` and
``hookbus_audit_consumer_lag{group}``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson
import pytest

from bus.decisionlog.audit import log_state
from bus.redis.keys import Keyspace
from bus.runtime.metrics import Metrics
from bus.runtime.settings import Tokens
from bus.stream.protocol import now_ms
from gateway.observer import Observer
from tests.conftest import BusProbe, assert_error, policy_yaml
from tests.hookbus.audit.test_command import AT_MS, record, write

TOKENS = {"tokens": Tokens.parse("acme:tok-acme,globex:tok-globex"), "admin_tokens": Tokens.parse_admin("tok-admin")}


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def fleet(bus: BusProbe) -> None:
    await write(
        bus,
        *[
            (i, record(i, tenant="acme" if i % 2 else "globex", decision="deny" if i == 3 else "allow"))
            for i in range(8)
        ],
    )


def ids(text: str) -> list[str]:
    return [orjson.loads(line)["id"][-1] for line in text.splitlines()]


async def test_a_tenant_token_reads_its_tenant_and_an_admin_token_reads_all(
    platform: Callable[..., Any], bus: BusProbe
) -> None:
    await fleet(bus)
    async with platform(**TOKENS) as p:
        url = f"{p.url}/v1/audit/events"
        acme = await p.client.get(url, headers=bearer("tok-acme"))
        assert acme.status_code == 200 and acme.headers["content-type"] == "application/x-ndjson"
        assert ids(acme.text) == list("1357")
        assert ids((await p.client.get(url, headers=bearer("tok-globex"))).text) == list("0246")
        assert ids((await p.client.get(url, headers=bearer("tok-admin"))).text) == list("01234567")
        admin_acme = await p.client.get(url, params={"tenant": "acme"}, headers=bearer("tok-admin"))
        assert ids(admin_acme.text) == list("1357")
        assert_error(await p.client.get(url, params={"tenant": "globex"}, headers=bearer("tok-acme")), 403, "forbidden")
        assert_error(await p.client.get(url), 401, "unauthorized")
        assert_error(await p.client.get(url, headers=bearer("tok-nobody")), 401, "unauthorized")


async def test_window_filters_resume_and_limit(platform: Callable[..., Any], bus: BusProbe) -> None:
    await fleet(bus)
    async with platform(**TOKENS) as p:
        url = f"{p.url}/v1/audit/events"

        async def get(**params: Any) -> list[str]:
            response = await p.client.get(url, params=params, headers=bearer("tok-admin"))
            assert response.status_code == 200, response.text
            return ids(response.text)

        assert await get(since=str(AT_MS + 2000), until=str(AT_MS + 5000)) == list("2345")
        assert await get(decision="deny") == ["3"]
        assert await get(tenant="acme", limit="2") == ["1", "3"]
        assert await get(after=f"{AT_MS + 5000}-0") == ["6", "7"]
        first = orjson.loads((await p.client.get(url, headers=bearer("tok-admin"))).text.splitlines()[0])
        assert first["log_id"] == f"{AT_MS}-0" and first["tenant"] == "globex"
        for params, code in (
            ({"since": "yesterday-ish"}, "invalid_time"),
            ({"since": "1h", "until": "2h"}, "invalid_time"),
            ({"tenants": "acme"}, "invalid_parameter"),
            ({"after": "x"}, "invalid_parameter"),
            ({"limit": "0"}, "invalid_parameter"),
        ):
            assert_error(await p.client.get(url, params=params, headers=bearer("tok-admin")), 400, code)


async def test_without_any_token_the_gateway_serves_every_tenant(platform: Callable[..., Any], bus: BusProbe) -> None:
    await fleet(bus)
    async with platform() as p:
        response = await p.client.get(f"{p.url}/v1/audit/events")
    assert ids(response.text) == list("01234567")


@pytest.mark.usefixtures("redis_url")
async def test_redis_down_is_a_503(platform: Callable[..., Any], private_redis: Any) -> None:
    async with platform(on_redis=private_redis.url) as p:
        private_redis.stop()
        response = await p.client.get(f"{p.url}/v1/audit/events")
    assert_error(response, 503, "unavailable")


# -- length, age and consumer lag -------------------------------------------------------------------


async def test_log_state_and_the_observer_gauges(bus: BusProbe) -> None:
    now = now_ms()
    await bus.redis.xadd(bus.keys.decision_log(), record(0).encode(), id=f"{now - 90_000}-0")  # type: ignore[arg-type]
    for i in range(1, 5):
        await bus.redis.xadd(bus.keys.decision_log(), record(i).encode(), id=f"{now - 1000 + i}-0")  # type: ignore[arg-type]
    await bus.redis.xgroup_create(bus.keys.decision_log(), "siem", id="0")
    await bus.redis.xgroup_create(bus.keys.decision_log(), "archive", id="$")
    delivered = await bus.redis.xreadgroup("siem", "c", {bus.keys.decision_log(): ">"}, count=2)
    await bus.redis.xack(bus.keys.decision_log(), "siem", delivered[0][1][0][0])  # one acknowledged, one pending

    state = await log_state(bus.redis, bus.keys, now)
    assert state.length == 5 and state.age_s == pytest.approx(90.0)
    groups = {g.name: g for g in state.groups}
    assert groups["siem"].pending == 1 and groups["siem"].lag == 4  # 1 pending + 3 never delivered
    assert groups["siem"].lag_s == pytest.approx(1.0 - 0.002, abs=0.01)  # the pending record's age
    assert groups["archive"].lag == 0 and groups["archive"].lag_s == 0.0

    m = Metrics()
    observer = Observer(bus.url, bus.keys, metrics=m)
    try:
        assert await observer.observe()
    finally:
        await observer.stop()
    assert m.value("hookbus_decision_log_length") == 5
    assert m.value("hookbus_decision_log_age_seconds") >= 90
    assert m.value("hookbus_audit_consumer_lag", group="siem") == 4
    assert m.registry.get_sample_value("hookbus_audit_consumer_lag", {"group": "archive"}) == 0  # set, not absent
    assert m.value("hookbus_audit_consumer_lag_seconds", group="siem") > 0


async def test_an_empty_log_is_length_0_and_age_0(bus: BusProbe) -> None:
    state = await log_state(bus.redis, bus.keys)
    assert (state.length, state.age_s, state.groups) == (0, 0.0, ())


# -- four partitions -------------------------------------------------------------------------------


async def test_pages_of_a_four_partition_log_merge_by_id_and_resume_without_a_gap(
    platform: Callable[..., Any], bus: BusProbe
) -> None:
    four = Keyspace(partitions=4)
    # Record i goes to partition i % 4 with the id of millisecond i // 2: partitions 0 and 1 (2 and 3) share ids.
    for i in range(20):
        await bus.redis.xadd(
            four.decision_log(i % 4),
            record(i, tenant="acme" if i % 3 else "globex").encode(),  # type: ignore[arg-type]
            id=f"{AT_MS + i // 2}-0",
        )
    async with platform(policy_yaml({}, streams={"partitions": 4}), **TOKENS) as p:
        url = f"{p.url}/v1/audit/events"

        async def page(**params: Any) -> list[dict[str, Any]]:
            response = await p.client.get(url, params=params, headers=bearer("tok-admin"))
            assert response.status_code == 200, response.text
            return [orjson.loads(line) for line in response.text.splitlines()]

        everything = await page()
        assert [r["id"] for r in everything] == [f"ev-{i:04d}" for i in range(20)]
        resumed: list[str] = []
        after: str | None = None
        while rows := await page(limit="3", **({"after": after} if after else {})):
            assert len(rows) in (3, 4) or len(resumed) + len(rows) == 20  # a page ends after the last one's ties
            resumed += [r["id"] for r in rows]
            after = rows[-1]["log_id"]
        assert resumed == [r["id"] for r in everything]
        acme = await p.client.get(url, params={"limit": "5"}, headers=bearer("tok-acme"))
        assert [orjson.loads(line)["id"] for line in acme.text.splitlines()] == [f"ev-{i:04d}" for i in (1, 2, 4, 5, 7)]


@pytest.mark.parametrize("decision", ["fail-open", "decided", "none,recorded"])
async def test_the_export_and_the_stream_pass_the_same_records(
    platform: Callable[..., Any], bus: BusProbe, decision: str
) -> None:
    from tests.gateway.decisionlog.test_sse import watching

    outcomes = ["decided", "fail-open", "recorded", "fail-open", "decided"]
    decisions = ["deny", "none", "none", "none", "allow"]
    await write(bus, *[(i, record(i, decision=decisions[i], outcome=outcomes[i])) for i in range(5)])
    async with platform() as p:
        exported = ids((await p.client.get(f"{p.url}/v1/audit/events", params={"decision": decision})).text)
        async with watching(p.url, params={"decision": decision, "backlog": "10"}) as stream:
            streamed = [d["id"][-1] for d in stream.decisions()]
    assert streamed == exported
    assert exported == {"fail-open": ["1", "3"], "decided": ["0", "4"], "none,recorded": ["1", "2", "3"]}[decision]


async def test_the_agent_filter_passes_the_same_records_on_the_export_and_the_stream(
    platform: Callable[..., Any], bus: BusProbe
) -> None:
    from tests.gateway.decisionlog.test_sse import watching

    agents = ["claude", "gemini", "codex", "gemini", "sdk"]
    await write(bus, *[(i, record(i, tenant="acme" if i < 3 else "globex", agent=agents[i])) for i in range(5)])
    async with platform(**TOKENS) as p:
        url = f"{p.url}/v1/audit/events"
        exported = await p.client.get(url, params={"agent": "GEMINI,sdk"}, headers=bearer("tok-admin"))
        assert exported.status_code == 200, exported.text
        async with watching(p.url, "tok-admin", params={"agent": "GEMINI,sdk", "backlog": "10"}) as stream:
            streamed = [(d["id"][-1], d["agent"]) for d in stream.decisions()]
        acme = await p.client.get(url, params={"agent": "gemini"}, headers=bearer("tok-acme"))  # within its scope
        claude = await p.client.get(url, params=[("agent", "claude")], headers=bearer("tok-admin"))
    assert [(r["id"][-1], r["agent"]) for r in map(orjson.loads, exported.text.splitlines())] == streamed
    assert streamed == [("1", "gemini"), ("3", "gemini"), ("4", "sdk")]
    assert ids(acme.text) == ["1"]
    assert ids(claude.text) == ["0"]
