"""deploy/prometheus: the scrape configurations, the alerting rules, their unit tests, the runbook.

promtool checks the files the way Prometheus loads them; the rest reads the YAML.
"""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from tests.deploy.metric_names import DEFINED_METRICS, KNOWN_METRICS, metric_names
from tests.deploy.promtool import promtool

REPO = Path(__file__).resolve().parents[2]
PROMETHEUS = REPO / "deploy" / "prometheus"
RUNBOOK = REPO / "docs" / "runbook.md"
RUNBOOK_URL = "https://github.com/hookbus/hookbus/blob/main/docs/runbook.md"
SCRAPE_CONFIGS = ("prometheus-up.yml", "prometheus-compose.yml")
SEVERITIES = {"critical", "warning", "info"}


def load(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


def alert_rules() -> list[dict[str, Any]]:
    return [rule for group in load(PROMETHEUS / "alerts.yaml")["groups"] for rule in group["rules"] if "alert" in rule]


def alert_names() -> list[str]:
    return [rule["alert"] for rule in alert_rules()]


def github_anchors(markdown: str) -> set[str]:
    """The anchors GitHub gives the headings of ``markdown`` (code blocks skipped)."""
    anchors: set[str] = set()
    seen: dict[str, int] = {}
    fenced = False
    for line in markdown.splitlines():
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
            continue
        match = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if fenced or not match:
            continue
        text = re.sub(r"[`*_]|\[([^\]]*)\]\([^)]*\)", r"\1", match.group(1)).strip().lower()
        slug = "".join(c for c in text if c in " -_" or unicodedata.category(c)[0] in "LN").replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        anchors.add(slug if count == 0 else f"{slug}-{count}")
    return anchors


def scrape_targets(config: dict[str, Any]) -> dict[str, set[str]]:
    """job name -> its targets (static ones, and name:port of DNS service discovery)."""
    jobs: dict[str, set[str]] = {}
    for job in config["scrape_configs"]:
        targets = jobs.setdefault(job["job_name"], set())
        for static in job.get("static_configs", []):
            targets.update(static["targets"])
        for dns in job.get("dns_sd_configs", []):
            targets.update(f"{name}:{dns['port']}" for name in dns["names"])
    return jobs


# --- promtool ----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", SCRAPE_CONFIGS)
@pytest.mark.system
def test_scrape_config_is_valid(name: str) -> None:
    result = promtool("check", "config", name, cwd=PROMETHEUS)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Checking alerts.yaml" in result.stdout  # the rules were found and checked too


@pytest.mark.system
def test_alert_rules_are_valid() -> None:
    result = promtool("check", "rules", "alerts.yaml", cwd=PROMETHEUS)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(alert_rules())} rules found" in result.stdout


@pytest.mark.system
def test_alert_unit_tests_pass() -> None:
    result = promtool("test", "rules", "alerts.test.yaml", cwd=PROMETHEUS)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


# --- scrape configurations ---------------------------------------------------------------------


@pytest.mark.parametrize("name", SCRAPE_CONFIGS)
def test_scrape_config_loads_the_alerts_by_relative_path(name: str) -> None:
    assert load(PROMETHEUS / name)["rule_files"] == ["alerts.yaml"]


def test_up_config_scrapes_the_gateway_only() -> None:
    # Under `hookbus up` the gateway's /metrics serves every role.
    config = load(PROMETHEUS / "prometheus-up.yml")
    assert scrape_targets(config) == {"hookbus": {"127.0.0.1:8787"}}
    assert config["scrape_configs"][0].get("metrics_path", "/metrics") == "/metrics"


def test_compose_config_scrapes_every_role() -> None:
    # One job per role, each naming its docker-compose.yml service and the port it serves
    # /metrics on (`--port 8787`, `--metrics-port 9101`, `--metrics-port 9102`).
    jobs = scrape_targets(load(PROMETHEUS / "prometheus-compose.yml"))
    assert jobs == {
        "hookbus-gateway": {"gateway:8787"},
        "hookbus-dispatcher": {"dispatcher:9101"},
        "hookbus-worker": {"worker:9102"},
    }


# --- alerting rules ----------------------------------------------------------------------------


def test_alert_names_are_unique() -> None:
    names = alert_names()
    assert len(names) == len(set(names))


@pytest.mark.parametrize("rule", alert_rules(), ids=alert_names())
def test_alert_has_severity_and_annotations(rule: dict[str, Any]) -> None:
    assert rule["labels"]["severity"] in SEVERITIES
    annotations = rule["annotations"]
    assert {"summary", "description", "runbook_url"} <= set(annotations)
    assert annotations["summary"].strip() and annotations["description"].strip()


@pytest.mark.parametrize("rule", alert_rules(), ids=alert_names())
def test_alert_links_to_its_runbook_section(rule: dict[str, Any]) -> None:
    url = urlsplit(rule["annotations"]["runbook_url"])
    assert url._replace(fragment="").geturl() == RUNBOOK_URL
    assert url.fragment == rule["alert"].lower()  # the section is titled with the alert's name
    assert url.fragment in github_anchors(RUNBOOK.read_text())


def test_runbook_has_no_section_for_an_alert_that_is_gone() -> None:
    # Alert sections are titled with the alert's name (HookbusFailingOpen -> #hookbusfailingopen).
    sections = {anchor for anchor in github_anchors(RUNBOOK.read_text()) if re.fullmatch(r"hookbus[a-z]+", anchor)}
    assert sections == {name.lower() for name in alert_names()}


def test_runbook_links_resolve() -> None:
    text = RUNBOOK.read_text()
    anchors = github_anchors(text)
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if target.startswith("#"):
            assert target[1:] in anchors, target
        elif "://" not in target:
            assert (RUNBOOK.parent / target.split("#")[0]).resolve().exists(), target


def test_alerts_use_known_metrics() -> None:
    used = metric_names(rule["expr"] for rule in alert_rules())
    assert used - KNOWN_METRICS == set()


def test_alerts_cover_every_signal() -> None:
    """Fail-opens, latency, dispatchers, lag, dead letters, Redis, policy loads, 401s and limits."""
    exprs = [rule["expr"] for rule in alert_rules()]
    used = metric_names(exprs)
    assert {
        "hookbus_fail_open_total",
        "hookbus_decision_latency_seconds",
        "hookbus_dispatchers_alive",
        "hookbus_stream_lag",
        "hookbus_dead_letters_total",
        "hookbus_dlq_size",
        "hookbus_redis_up",
        "hookbus_redis_errors_total",
        "hookbus_policy_load_failures_total",
        "hookbus_limited_total",  # limited events: 429s and the 200s of blocking ones
    } <= used
    assert any("absent(hookbus_dispatchers_alive)" in expr for expr in exprs)
    assert any('hookbus_rejected_requests_total{code="401"}' in expr for expr in exprs)


def test_defined_metrics_are_in_the_source() -> None:
    source = "".join(
        (REPO / "bus" / "runtime" / name).read_text()
        for name in ("metrics.py", "auditmetrics.py", "approvalmetrics.py", "sessionmetrics.py")
    )
    assert {name for name in DEFINED_METRICS if f'"{name}"' not in source} == set()


# --- unit tests of the rules -------------------------------------------------------------------


def test_every_alert_fires_in_one_test_and_stays_quiet_in_another() -> None:
    tests = load(PROMETHEUS / "alerts.test.yaml")
    assert tests["rule_files"] == ["alerts.yaml"]
    fires: set[str] = set()
    quiet: set[str] = set()
    for group in tests["tests"]:
        for case in group.get("alert_rule_test", []):
            (fires if case.get("exp_alerts") else quiet).add(case["alertname"])
    names = set(alert_names())
    assert names - fires == set(), "alerts never seen firing"
    assert names - quiet == set(), "alerts never seen quiet"
    assert (fires | quiet) - names == set(), "tests of alerts that do not exist"
