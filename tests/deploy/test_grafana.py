"""deploy/grafana: the provisioned data source and dashboard provider, and the hookbus dashboard."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy.metric_names import KNOWN_METRICS, metric_names
from tests.deploy.promtool import promtool

REPO = Path(__file__).resolve().parents[2]
GRAFANA = REPO / "deploy" / "grafana"
DASHBOARD = GRAFANA / "dashboards" / "hookbus.json"
DATASOURCES = GRAFANA / "provisioning" / "datasources" / "prometheus.yml"
PROVIDERS = GRAFANA / "provisioning" / "dashboards" / "hookbus.yml"
BLOCK_RATE = 'sum(rate(hookbus_decisions_total{decision=~"deny|block"}[5m])) / sum(rate(hookbus_decisions_total[5m]))'
EVENTS_BY_AGENT = "sum by (agent) (rate(hookbus_events_total[$__rate_interval]))"
TOP_BLOCKING_HANDLERS = 'topk(10, sum by (handler) (rate(hookbus_handler_decisions_total{decision=~"deny|block"}[5m])))'


def dashboard() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return data


def panels(items: list[dict[str, Any]] | None = None) -> Iterator[dict[str, Any]]:
    """Every panel, rows included, with the panels of collapsed rows."""
    for panel in dashboard()["panels"] if items is None else items:
        yield panel
        yield from panels(panel.get("panels", []))


def graph_panels() -> list[dict[str, Any]]:
    return [panel for panel in panels() if panel["type"] != "row"]


def expressions() -> list[str]:
    return [target["expr"] for panel in graph_panels() for target in panel.get("targets", [])]


def dashboard_metric_names() -> set[str]:
    """Every hookbus metric family the dashboard's panels query."""
    return metric_names(expressions())


def provisioned_datasource() -> dict[str, Any]:
    (datasource,) = yaml.safe_load(DATASOURCES.read_text())["datasources"]
    return {"type": datasource["type"], "uid": datasource["uid"]}


def test_dashboard_is_a_provisionable_dashboard() -> None:
    text = DASHBOARD.read_text()
    data = dashboard()
    assert data["uid"] == "hookbus" and data["title"]
    assert 36 <= data["schemaVersion"] <= 41
    assert data.get("id") is None  # Grafana assigns it
    # No import-time inputs: the data source is referred to by the provisioned uid.
    assert "__inputs" not in data
    assert "${DS_" not in text and "$DS_" not in text


def test_provisioned_datasource() -> None:
    config = yaml.safe_load(DATASOURCES.read_text())
    assert config["apiVersion"] == 1
    (datasource,) = config["datasources"]
    assert datasource["type"] == "prometheus"
    assert datasource["access"] == "proxy"
    assert datasource["url"].startswith("http")


def test_provisioned_dashboard_provider() -> None:
    config = yaml.safe_load(PROVIDERS.read_text())
    assert config["apiVersion"] == 1
    (provider,) = config["providers"]
    assert provider["type"] == "file"
    assert provider["options"]["path"].startswith("/")


def test_panels_have_unique_ids_and_fit_the_grid() -> None:
    ids = [panel["id"] for panel in panels()]
    assert len(ids) == len(set(ids))
    cells: set[tuple[int, int]] = set()
    for panel in panels():
        pos = panel["gridPos"]
        assert pos["x"] >= 0 and pos["w"] > 0 and pos["x"] + pos["w"] <= 24, panel["title"]
        area = {(x, y) for x in range(pos["x"], pos["x"] + pos["w"]) for y in range(pos["y"], pos["y"] + pos["h"])}
        assert not area & cells, f"{panel['title']} overlaps another panel"
        cells |= area


def test_every_panel_has_a_promql_target() -> None:
    datasource = provisioned_datasource()
    assert graph_panels()
    for panel in graph_panels():
        targets = panel.get("targets", [])
        assert targets, f"{panel['title']} has no query"
        assert panel["datasource"] == datasource, panel["title"]
        ref_ids = [target["refId"] for target in targets]
        assert len(ref_ids) == len(set(ref_ids)), panel["title"]
        for target in targets:
            assert target["datasource"] == datasource, panel["title"]
            assert isinstance(target.get("expr"), str) and "hookbus_" in target["expr"], panel["title"]


def test_dashboard_uses_known_metrics() -> None:
    assert dashboard_metric_names() - KNOWN_METRICS == set()


def test_dashboard_shows_what_ops_asked_for() -> None:
    assert {
        "hookbus_decisions_total",  # decisions per second by decision, block rate
        "hookbus_decision_latency_seconds",  # p50/p95/p99
        "hookbus_fail_open_total",  # fail-opens by reason
        "hookbus_handler_decisions_total",  # top blocking handlers
        "hookbus_hook_duration_seconds",  # hook durations by type
        "hookbus_async_queue_depth",  # queue depth
        "hookbus_stream_lag",  # consumer lag
        "hookbus_async_jobs_total",  # async outcomes
        "hookbus_dead_letters_total",  # dead letters
        "hookbus_rejected_requests_total",  # rejected requests by code
        "hookbus_policy_info",  # policy version per node
        "hookbus_events_total",  # events by agent
        "hookbus_audit_consumer_lag_seconds",  # audit pipelines: lag, throughput, errors, losses
        "hookbus_audit_sink_lag_seconds",
        "hookbus_audit_sink_records_total",
        "hookbus_audit_sink_errors_total",
        "hookbus_audit_sink_dead_letters_total",
        "hookbus_audit_trimmed_unread_total",
    } <= dashboard_metric_names()
    exprs = expressions()
    assert BLOCK_RATE in exprs
    assert TOP_BLOCKING_HANDLERS in exprs
    (by_agent,) = [panel for panel in graph_panels() if panel["title"] == "Events by agent"]
    assert [target["expr"] for target in by_agent["targets"]] == [EVENTS_BY_AGENT]
    quantiles = {
        match.group(1)
        for expr in exprs
        if "hookbus_decision_latency_seconds_bucket" in expr
        for match in [re.search(r"histogram_quantile\((0\.\d+)", expr)]
        if match
    }
    assert quantiles >= {"0.5", "0.95", "0.99"}


@pytest.mark.system
def test_dashboard_expressions_parse(tmp_path: Path) -> None:
    # promtool has no bare PromQL check: load every expression as a recording rule instead,
    # with Grafana's interval variables replaced by a real duration.
    rules = [
        {"record": f"hookbus_dashboard:expr_{n}", "expr": re.sub(r"\$__\w+", "5m", expr)}
        for n, expr in enumerate(expressions())
    ]
    path = tmp_path / "dashboard-rules.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    result = promtool("check", "rules", path.name, cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(rules)} rules found" in result.stdout


@pytest.mark.parametrize("name", ["hookbus_decision_latency_seconds_bucket", "hookbus_hook_duration_seconds_sum"])
def test_metric_names_count_histogram_series_as_their_family(name: str) -> None:
    assert metric_names([f"rate({name}[5m])", 'up{job=~"hookbus.*"}']) == {name.rsplit("_", 1)[0]}
