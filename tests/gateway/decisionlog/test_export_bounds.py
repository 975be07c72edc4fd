"""What one ``GET /v1/audit/events`` may cost: exports at once per token and per process (429 past
either), log entries read per request (a cursor line to resume from), and other tenants' records
skipped before they are decoded."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import orjson
import pytest

from bus.decisionlog.audit import RecordFilter, Window, read_window
from bus.errors import RequestRejected
from bus.stream.protocol import LogRecord
from gateway.decisionlog import export as export_module
from tests.conftest import BusProbe, assert_error
from tests.gateway.decisionlog.test_export import TOKENS, bearer
from tests.hookbus.audit.test_command import AT_MS, record, write

BIG = orjson.dumps({"hook_event_name": "PreToolUse", "session_id": "s-1", "blob": "x" * 256_000})


async def test_exports_at_once_are_limited_per_token_and_released_after(
    platform: Callable[..., Any], bus: BusProbe, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(export_module, "READS_PER_TOKEN", 1)
    # Far more than the sockets buffer: an export nobody reads stays open, holding its slot.
    big = [(i, dataclasses.replace(record(i, tenant="acme"), payload=BIG)) for i in range(120)]
    await write(bus, *big)
    # No dispatcher: its janitor would trim these records (older than the log's retention).
    async with platform(dispatchers=0, **TOKENS) as p:
        url = f"{p.url}/v1/audit/events"
        async with p.client.stream("GET", url, headers=bearer("tok-acme")) as held:
            assert held.status_code == 200
            refused = await p.client.get(url, headers=bearer("tok-acme"))
            body = assert_error(refused, 429, "too_many_reads")
            assert refused.headers["retry-after"] == "1" and "this token" in body["detail"]
            assert len((await held.aread()).splitlines()) == 120
        again = await p.client.get(url, params={"limit": "1"}, headers=bearer("tok-acme"))
        assert again.status_code == 200, again.text  # the slot is back
        assert len(again.text.splitlines()) == 1


def test_read_slots_per_token_and_per_process() -> None:
    slots = export_module.read_slots(per_key=1, total=2)
    slots.take("a")
    with pytest.raises(RequestRejected, match="this token"):
        slots.take("a")
    slots.take("b")
    with pytest.raises(RequestRejected, match="this gateway") as refused:
        slots.take("c")
    assert refused.value.status == 429 and refused.value.headers == {"Retry-After": "1"}
    slots.give_back("a")
    slots.take("c")
    assert slots.held() == 2 and slots.held("a") == 0


async def test_a_page_stops_after_the_bound_with_a_cursor_that_resumes_without_loss(
    platform: Callable[..., Any], bus: BusProbe, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(export_module, "EXAMINE", 3)
    # acme's records are sparse: 2 of 10.
    await write(bus, *[(i, record(i, tenant="acme" if i in (4, 9) else "globex")) for i in range(10)])
    async with platform(**TOKENS) as p:
        url = f"{p.url}/v1/audit/events"
        got: list[str] = []
        after: str | None = None
        pages = 0
        while True:
            params = {"after": after} if after else {}
            response = await p.client.get(url, params=params, headers=bearer("tok-acme"))
            assert response.status_code == 200, response.text
            lines = [orjson.loads(line) for line in response.text.splitlines()]
            pages += 1
            records = [line for line in lines if "more" not in line]
            assert all(line["tenant"] == "acme" for line in records)
            got += [line["id"] for line in records]
            if not lines or "more" not in lines[-1]:
                break
            assert lines[-1]["examined"] <= 3
            after = lines[-1]["log_id"]
        assert got == ["ev-0004", "ev-0009"] and pages == 4  # 3 + 3 + 3 + 1 entries read
        first = orjson.loads((await p.client.get(url, headers=bearer("tok-acme"))).text)
        assert first == {"log_id": f"{AT_MS + 2000}-0", "more": True, "examined": 3}


async def test_other_tenants_records_are_never_decoded(bus: BusProbe, monkeypatch: pytest.MonkeyPatch) -> None:
    await write(bus, *[(i, record(i, tenant="acme" if i % 3 == 0 else "globex")) for i in range(9)])
    decoded: list[str] = []
    real = LogRecord.decode

    def counting(fields: Any) -> LogRecord:
        found = real(fields)
        decoded.append(found.tenant)
        return found

    monkeypatch.setattr(LogRecord, "decode", staticmethod(counting))
    read = [r async for _, r in read_window(bus.redis, bus.keys, Window(), RecordFilter(scope="acme"))]
    assert [r.event_id for r in read] == ["ev-0000", "ev-0003", "ev-0006"]
    assert decoded == ["acme"] * 3
    decoded.clear()
    admin = RecordFilter.of(tenants=["globex"])
    assert len([r async for r in read_window(bus.redis, bus.keys, Window(), admin)]) == 6
    assert decoded == ["globex"] * 6
    decoded.clear()
    assert len([r async for r in read_window(bus.redis, bus.keys, Window(), RecordFilter())]) == 9
    assert len(decoded) == 9


def test_an_entry_written_another_way_is_decoded_to_be_sure() -> None:
    may_pass = RecordFilter(scope="acme").entry_filter()
    assert may_pass is not None
    assert may_pass({b"r": b'{"id":"e","tn":"acme"}'})
    assert not may_pass({b"r": b'{"id":"e","tn":"globex"}'})
    assert may_pass({b"r": b'{"id": "e", "tn": "globex"}'})  # not orjson's form: decode it and see
    assert may_pass({}) and may_pass(None)
    assert RecordFilter().entry_filter() is None
