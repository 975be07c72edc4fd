"""docker-compose.yml and the Dockerfile, checked against the code they run.

No container engine is available where these tests run, so nothing is built or started: the
files are parsed and held against the CLI parser, bus/runtime/settings.py, the Prometheus scrape
configuration and the files they mount.
"""

from __future__ import annotations

import importlib
import importlib.util
import re
import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
COMPOSE = REPO / "docker-compose.yml"
DOCKERFILE = REPO / "Dockerfile"
DOCKERIGNORE = REPO / ".dockerignore"
ENV_EXAMPLE = REPO / "deploy" / "compose" / "hookbus.env.example"
PROMETHEUS = REPO / "deploy" / "prometheus" / "prometheus-compose.yml"
SETTINGS_SOURCE = REPO / "bus" / "runtime" / "settings.py"
ROLES = ("gateway", "dispatcher", "worker")
PACKAGES = ("bus", "gateway", "workers", "hookbus")


def build_parser() -> Any:
    """The hookbus CLI parser, wherever the restructure has put it."""
    module = "hookbus.cli" if importlib.util.find_spec("hookbus.cli") else "bus.cli"
    return importlib.import_module(module).build_parser()


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(COMPOSE.read_text())
    return data


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    found: dict[str, dict[str, Any]] = compose["services"]
    return found


@pytest.fixture(scope="module")
def hookbus_services(services: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The services that run the hookbus image (built from this checkout)."""
    return {name: svc for name, svc in services.items() if "build" in svc}


def parse_command(service: dict[str, Any]) -> Any:
    command = service["command"]
    argv = shlex.split(command) if isinstance(command, str) else [str(a) for a in command]
    try:
        return build_parser().parse_args(argv)
    except SystemExit as exc:  # argparse's way of saying no
        raise AssertionError(f"not a valid hookbus command line: {argv}") from exc


def served_port(args: Any) -> int:
    port = args.port if args.command == "gateway" else args.metrics_port
    assert port, f"{args.command} must serve HTTP on a fixed port (--port / --metrics-port)"
    return int(port)


def healthcheck_text(service: dict[str, Any]) -> str:
    test = service["healthcheck"]["test"]
    return test if isinstance(test, str) else " ".join(str(t) for t in test)


def env_assignments(path: Path, *, commented: bool) -> dict[str, str]:
    """KEY=VALUE lines of an env file; with ``commented``, also ``# KEY=VALUE`` examples."""
    pattern = re.compile(r"^\s*(#\s*)?([A-Za-z_][A-Za-z0-9_]*)=(.*)$")
    found = {}
    for line in path.read_text().splitlines():
        match = pattern.match(line)
        if match and (commented or not match.group(1)):
            found[match.group(2)] = match.group(3).strip()
    return found


def environment(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.split("=", 1) if "=" in item else (item, "") for item in env)
    return {k: "" if v is None else str(v) for k, v in env.items()}


def env_files(service: dict[str, Any]) -> list[tuple[Path, bool]]:
    entries = service.get("env_file") or []
    if isinstance(entries, str | dict):
        entries = [entries]
    files = []
    for entry in entries:
        if isinstance(entry, str):
            files.append((REPO / entry, True))
        else:
            files.append((REPO / entry["path"], entry.get("required", True)))
    return files


def mounts(service: dict[str, Any]) -> dict[str, str]:
    """Bind mounts of files in this checkout: container path -> host path (relative to the repo)."""
    result = {}
    for volume in service.get("volumes", []):
        if isinstance(volume, dict):
            source, target = volume.get("source", ""), volume["target"]
        else:
            source, target = volume.split(":")[:2]
        if source.startswith("./"):
            result[target] = source[2:]
    return result


# ---- the hookbus services -------------------------------------------------------------------


def test_one_image_runs_every_role(hookbus_services: dict[str, dict[str, Any]]) -> None:
    assert set(hookbus_services) == set(ROLES)
    assert len({svc["image"] for svc in hookbus_services.values()}) == 1
    for name, svc in hookbus_services.items():
        assert parse_command(svc).command == name


def test_commands_are_valid_cli_invocations_with_the_mounted_policy(
    hookbus_services: dict[str, dict[str, Any]],
) -> None:
    for name, svc in hookbus_services.items():
        args = parse_command(svc)
        assert args.config, f"{name}: no --config"
        for path in args.config:
            host_path = mounts(svc).get(path)
            assert host_path, f"{name}: --config {path} is not a mounted file"
            assert (REPO / host_path).is_file(), f"{name}: {host_path} does not exist"
        if name == "gateway":
            assert args.host == "0.0.0.0", "the gateway must listen beyond the container's loopback"


def test_ports_are_the_ones_probed_exposed_and_scraped(hookbus_services: dict[str, dict[str, Any]]) -> None:
    scrape = yaml.safe_load(PROMETHEUS.read_text()) if PROMETHEUS.exists() else None
    for name, svc in hookbus_services.items():
        port = served_port(parse_command(svc))
        probe = healthcheck_text(svc)
        probed = re.findall(r"127\.0\.0\.1:(\d+)/(healthz|readyz)", probe)
        assert probed and {int(p) for p, _ in probed} == {port}, f"{name}: healthcheck probes {probed}, serves {port}"
        assert str(port) in [str(p) for p in svc.get("expose", [])], f"{name}: {port} not exposed to the network"
        assert "ports" not in svc, f"{name}: a published host port stops `--scale {name}=N`"
        if scrape is None:
            continue
        targets = set()
        for job in scrape["scrape_configs"]:
            for static in job.get("static_configs", []):
                targets.update(static.get("targets", []))
            for dns in job.get("dns_sd_configs", []):
                targets.update(f"{n}:{dns['port']}" for n in dns.get("names", []))
        assert f"{name}:{port}" in targets, f"{PROMETHEUS.name} does not scrape {name}:{port}"


def test_every_hookbus_variable_is_one_the_settings_read(hookbus_services: dict[str, dict[str, Any]]) -> None:
    source = SETTINGS_SOURCE.read_text()
    names = set(env_assignments(ENV_EXAMPLE, commented=True))
    for svc in hookbus_services.values():
        names.update(environment(svc))
        for path, _required in env_files(svc):
            if path.exists():
                names.update(env_assignments(path, commented=True))
    hookbus_names = {n for n in names if n.startswith("HOOKBUS_")}
    assert "HOOKBUS_TOKENS" in hookbus_names
    unknown = sorted(n for n in hookbus_names if f'"{n}"' not in source)
    assert unknown == [], f"not read by bus/runtime/settings.py: {unknown}"


def test_env_example_gives_working_settings(hookbus_services: dict[str, dict[str, Any]]) -> None:
    from bus.runtime.settings import Settings

    for name, svc in hookbus_services.items():
        files = env_files(svc)
        assert (ENV_EXAMPLE, True) in files, f"{name}: must load {ENV_EXAMPLE.relative_to(REPO)}"
        for path, required in files:
            assert path.exists() or not required, f"{name}: required env file {path} is missing"
        env = {**env_assignments(ENV_EXAMPLE, commented=False), **environment(svc)}
        settings = Settings.from_env(env)
        assert settings.redis_url and settings.redis_url.startswith("redis://redis:"), name
        assert len(settings.tokens) >= 1, f"{name}: the example must configure tokens"
        assert settings.reply_key is not None, f"{name}: the example must configure a reply key"


def test_redis_is_durable_and_awaited(services: dict[str, dict[str, Any]], hookbus_services: dict[str, Any]) -> None:
    redis = services["redis"]
    command = " ".join(redis["command"]) if isinstance(redis["command"], list) else redis["command"]
    assert "--appendonly yes" in command
    assert any(str(v).endswith(":/data") for v in redis["volumes"])
    assert "redis-cli" in healthcheck_text(redis)
    for name, svc in hookbus_services.items():
        assert svc["depends_on"]["redis"]["condition"] == "service_healthy", name
        assert svc["environment"]["HOOKBUS_REDIS_URL"].startswith("redis://redis:6379/"), name


def test_every_service_restarts_and_reports_health(services: dict[str, dict[str, Any]]) -> None:
    for name, svc in services.items():
        assert svc.get("restart") in {"unless-stopped", "always"}, name
        assert svc.get("healthcheck", {}).get("test"), f"{name}: no healthcheck"


def test_hookbus_containers_are_hardened(hookbus_services: dict[str, dict[str, Any]]) -> None:
    for name, svc in hookbus_services.items():
        assert svc.get("read_only") is True, name
        assert "/tmp" in svc.get("tmpfs", []), name
        assert svc.get("cap_drop") == ["ALL"], name
        assert "no-new-privileges:true" in svc.get("security_opt", []), name
        grace = int(str(svc.get("stop_grace_period", "10s")).rstrip("s"))
        assert grace >= 30, f"{name}: stop_grace_period must outlast the drain"


def test_one_published_entry_point_spreads_over_the_gateways(services: dict[str, dict[str, Any]]) -> None:
    published: dict[str, list[str]] = {}
    for name, svc in services.items():
        for mapping in svc.get("ports", []):
            host, _, container = str(mapping).rpartition(":")
            published.setdefault(host, []).append(name)
            if name == "edge":
                assert container == "8787"
    assert all(len(owners) == 1 for owners in published.values()), published
    (edge_ports,) = services["edge"]["ports"]
    assert "127.0.0.1:8787" in edge_ports, "published on the loopback unless asked otherwise"
    conf_path = mounts(services["edge"])["/etc/nginx/nginx.conf"]
    conf = (REPO / conf_path).read_text()
    assert re.search(r"listen\s+8787;", conf)
    assert "http://gateway:8787" in conf
    assert "resolver 127.0.0.11" in conf, "re-resolve the scaled gateway service"


def test_prometheus_and_grafana_are_provisioned_from_the_repo(services: dict[str, dict[str, Any]]) -> None:
    prometheus = mounts(services["prometheus"])
    config_target = next(t for t, s in prometheus.items() if s == "deploy/prometheus/prometheus-compose.yml")
    assert f"--config.file={config_target}" in services["prometheus"]["command"]
    assert "deploy/prometheus/alerts.yaml" in prometheus.values()
    if PROMETHEUS.exists():
        config_dir = Path(config_target).parent
        for rule_file in yaml.safe_load(PROMETHEUS.read_text()).get("rule_files", []):
            target = str(config_dir / rule_file)
            assert target in prometheus, f"rule file {rule_file} is not mounted at {target}"
            assert (REPO / prometheus[target]).is_file()

    grafana = mounts(services["grafana"])
    assert grafana.get("/etc/grafana/provisioning") == "deploy/grafana/provisioning"
    dashboards_target = next(t for t, s in grafana.items() if s == "deploy/grafana/dashboards")
    provisioning = REPO / "deploy" / "grafana" / "provisioning"
    for provider_file in sorted((provisioning / "dashboards").glob("*.y*ml")):
        for provider in (yaml.safe_load(provider_file.read_text()) or {}).get("providers", []):
            path = provider.get("options", {}).get("path", "")
            assert path.startswith(dashboards_target), f"{provider_file.name}: {path} is not {dashboards_target}"
    for source_file in sorted((provisioning / "datasources").glob("*.y*ml")):
        for source in (yaml.safe_load(source_file.read_text()) or {}).get("datasources", []):
            if source.get("type") == "prometheus":
                assert "prometheus:9090" in source.get("url", ""), source_file.name


# ---- the image ------------------------------------------------------------------------------


def _final_stage(dockerfile: str) -> str:
    return re.split(r"(?m)^FROM\s", dockerfile)[-1]


def test_dockerfile_builds_a_wheel_and_ships_a_slim_non_root_image() -> None:
    text = DOCKERFILE.read_text()
    assert len(re.findall(r"(?m)^FROM\s", text)) >= 2, "multi-stage"
    base = re.search(r"(?m)^ARG PYTHON_IMAGE=(\S+)$", text)
    assert base and base.group(1).startswith("python:3.11-slim-bookworm"), "pinned base image"
    assert re.search(r"pip wheel .*--wheel-dir", text)
    final = _final_stage(text)
    assert final.startswith("${PYTHON_IMAGE}")
    assert "build-essential" not in final and "apt-get install" not in final, "no build tools at run time"
    assert "COPY --from=builder" in final
    user = re.search(r"(?m)^USER\s+(\S+)", final)
    assert user and user.group(1).split(":")[0] not in {"root", "0"}
    assert re.search(r'(?m)^ENTRYPOINT \["hookbus"\]$', final)
    healthcheck = re.search(r"(?ms)^HEALTHCHECK .*?CMD (\[.*?\])$", final)
    assert healthcheck and "urllib.request" in healthcheck.group(1)
    assert "HOOKBUS_HEALTH_URL" in healthcheck.group(1)
    assert "HOOKBUS_HEALTH_URL=http://127.0.0.1:8787/healthz" in final


def test_dockerfile_copies_every_package_and_dockerignore_keeps_them() -> None:
    text = DOCKERFILE.read_text()
    for package in PACKAGES:
        assert re.search(rf"(?m)^COPY {package} \./{package}$", text), f"the image lacks {package}/"
    ignore = DOCKERIGNORE.read_text().splitlines()
    assert "*" in ignore, "an allowlist: everything else stays out of the build context"
    kept = {line[1:].rstrip("/") for line in ignore if line.startswith("!")}
    assert kept >= {*PACKAGES, "pyproject.toml", "README.md", "examples/policy.yaml"}
    assert "**/__pycache__" in ignore
