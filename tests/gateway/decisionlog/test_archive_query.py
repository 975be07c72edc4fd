"""``GET /v1/audit/query`` (:mod:`gateway.decisionlog.archive`) on a live gateway: a tenant's token
reads its own records only, whatever the SQL; an org-admin token reads every tenant's."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from bus.decisionlog.archivesql import archive_files
from bus.decisionlog.parquet import ArchiveTarget, rows_by_partition
from tests.bus.decisionlog.archive_records import entry, fields_of, log_record
from tests.conftest import BusProbe, assert_error
from tests.gateway.decisionlog.test_export import TOKENS, bearer


async def fleet(bus: BusProbe, root: Path) -> None:
    """Archived: records 0-5, acme and globex in turn; in Redis only: 6-7 (no archive group yet)."""
    tenants = ("acme", "globex")
    ArchiveTarget(str(root)).write(rows_by_partition([entry(i, tenant=tenants[i % 2]) for i in range(6)])[0])
    for i in (6, 7):
        await bus.redis.xadd(bus.keys.decision_log(), fields_of(log_record(i, tenant=tenants[i % 2])))  # type: ignore[arg-type]


def rows(text: str) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in text.splitlines()]


async def test_a_tenant_token_queries_its_own_records_only(
    platform: Callable[..., Any], bus: BusProbe, tmp_path: Path
) -> None:
    await fleet(bus, tmp_path)
    globex_file = next(p for p in archive_files(str(tmp_path)) if "tenant=globex" in p)
    async with platform(archive_dir=str(tmp_path), **TOKENS) as p:
        url = f"{p.url}/v1/audit/query"

        async def ask(sql: str, token: str) -> Any:
            return await p.client.get(url, params={"sql": sql}, headers=bearer(token))

        sql = "SELECT tenant, count(*) AS n FROM records GROUP BY ALL ORDER BY ALL"
        acme = await ask(sql, "tok-acme")
        assert acme.status_code == 200 and acme.headers["content-type"] == "application/x-ndjson"
        assert rows(acme.text) == [{"tenant": "acme", "n": 4}]  # three archived, one in Redis
        assert rows((await ask(sql, "tok-admin")).text) == [{"tenant": "acme", "n": 4}, {"tenant": "globex", "n": 4}]
        assert rows((await ask("SELECT count(*) AS n FROM records WHERE tenant = 'globex'", "tok-acme")).text) == [
            {"n": 0}
        ]
        for trick in (f"SELECT * FROM read_parquet('{globex_file}')", "SELECT * FROM read_csv('/etc/passwd')"):
            refused = assert_error(await ask(trick, "tok-acme"), 400, "query_failed")
            assert refused["detail"].startswith("refused:")
        assert_error(await ask("SELECT * FROM nosuch", "tok-acme"), 400, "query_failed")
        assert_error(await p.client.get(url, params={"sql": "SELECT 1"}), 401, "unauthorized")
        assert_error(await p.client.get(url, headers=bearer("tok-acme")), 400, "invalid_parameter")
        assert_error(await p.client.get(url, params={"sql": "SELECT 1", "x": "1"}, headers=bearer("tok-acme")), 400)


async def test_without_an_archive_it_is_a_404(platform: Callable[..., Any], bus: BusProbe) -> None:
    async with platform(**TOKENS) as p:
        found = await p.client.get(f"{p.url}/v1/audit/query", params={"sql": "SELECT 1"}, headers=bearer("tok-admin"))
        assert_error(found, 404, "not_found")
