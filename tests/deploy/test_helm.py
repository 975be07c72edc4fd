"""The Helm chart (helm/hookbus), linted and rendered by Helm itself, then checked.

Helm comes from the ``helm-python-sdk`` wheel (Helm v4's Go SDK behind a C ABI, no ``helm``
binary); every rendered manifest is validated against the Kubernetes OpenAPI schemas that the
``kubernetes-validate`` wheel ships (offline, strict: unknown fields are errors). Both are dev
tools: without them these tests skip, except under CI (``HOOKBUS_CI=1``), where a missing tool fails.

Bitnami's ``redis`` / ``redis-cluster`` charts (optional dependencies, off by default) live in an
OCI registry that this machine cannot reach, so ``charts/`` stays empty: lint reports that as a
warning (the only one tolerated), and the subchart modes are checked on the parent chart's own
output (the env wiring), not on the subcharts' manifests.
"""

from __future__ import annotations

import base64
import importlib
import importlib.util
import json
import re
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from tests.ci import missing

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "helm" / "hookbus"
CI_DIR = CHART / "ci"
CI_VALUES = sorted(CI_DIR.glob("*.yaml"))
ROLES = ("gateway", "dispatcher", "worker")
STANDARD_LABELS = (
    "app.kubernetes.io/name",
    "app.kubernetes.io/instance",
    "app.kubernetes.io/component",
    "app.kubernetes.io/version",
    "app.kubernetes.io/managed-by",
)
SELECTOR_LABELS = ("app.kubernetes.io/name", "app.kubernetes.io/instance", "app.kubernetes.io/component")
MISSING_DEPENDENCIES = "chart directory is missing these dependencies"
# The oldest Kubernetes the chart supports (Chart.yaml kubeVersion) and the newest with schemas.
KUBE_VERSIONS = ("1.25.0", "latest")
RELEASE = "hb"
NAMESPACE = "hookbus"


def _tool(module: str, package: str) -> ModuleType:
    try:
        return importlib.import_module(module)
    except ImportError:
        missing(f"{package} is not installed (pip install {package})")


@pytest.fixture(scope="module")
def helm() -> ModuleType:
    return _tool("helm_python", "helm-python-sdk")


@pytest.fixture(scope="module")
def kube_validate() -> ModuleType:
    return _tool("kubernetes_validate", "kubernetes-validate")


def _values(path: Path | None) -> dict[str, Any]:
    if path is None:
        return {}
    return yaml.safe_load(path.read_text()) or {}


def _render_raw(helm: ModuleType, values: dict[str, Any], name: str = RELEASE) -> dict[str, str]:
    with helm.Chart.load(str(CHART)) as chart:
        manifests: dict[str, str] = chart.render(values, name=name, namespace=NAMESPACE, is_install=True)
    return manifests


def render(helm: ModuleType, values: dict[str, Any], name: str = RELEASE) -> list[dict[str, Any]]:
    """The rendered objects (NOTES.txt left out)."""
    docs: list[dict[str, Any]] = []
    for path, text in sorted(_render_raw(helm, values, name).items()):
        if path.endswith("NOTES.txt"):
            continue
        docs.extend(doc for doc in yaml.safe_load_all(text) if doc)
    return docs


def notes(helm: ModuleType, values: dict[str, Any]) -> str:
    return next(text for path, text in _render_raw(helm, values).items() if path.endswith("NOTES.txt"))


def objects(docs: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == kind}


def deployment(docs: list[dict[str, Any]], role: str, release: str = RELEASE) -> dict[str, Any]:
    return objects(docs, "Deployment")[f"{release}-hookbus-{role}"]


def container(dep: dict[str, Any]) -> dict[str, Any]:
    containers: list[dict[str, Any]] = dep["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1
    return containers[0]


def env_of(dep: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {e["name"]: e for e in container(dep).get("env", [])}


def selects(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


def build_parser() -> Any:
    """The hookbus CLI parser, wherever the restructure has put it."""
    module = "hookbus.cli" if importlib.util.find_spec("hookbus.cli") else "bus.cli"
    return importlib.import_module(module).build_parser()


values_files = pytest.mark.parametrize("values_file", CI_VALUES, ids=[p.stem for p in CI_VALUES])


# ---- the chart's files ----------------------------------------------------------------------


def test_ci_values_cover_the_documented_modes() -> None:
    assert {p.name for p in CI_VALUES} >= {
        "default-values.yaml",
        "cluster-values.yaml",
        "ingress-hpa-values.yaml",
        "external-secret-values.yaml",
    }


def test_chart_metadata_and_condition_gated_bitnami_dependencies() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["apiVersion"] == "v2"
    assert chart["type"] == "application"
    deps = {d["name"]: d for d in chart["dependencies"]}
    assert set(deps) == {"redis", "redis-cluster"}
    for name, dep in deps.items():
        assert dep["repository"] == "oci://registry-1.docker.io/bitnamicharts"
        assert dep["condition"] == f"{name}.enabled"
    defaults = yaml.safe_load((CHART / "values.yaml").read_text())
    assert defaults["redis"]["enabled"] is False
    assert defaults["redis-cluster"]["enabled"] is False


def test_templates_have_no_constant_comparisons_and_no_home_made_redis() -> None:
    for template in (CHART / "templates").iterdir():
        text = template.read_text()
        assert not re.search(r'\beq\s+"[^"]*"\s+"[^"]*"', text), f"{template.name}: constant comparison"
        assert "StatefulSet" not in text, f"{template.name}: Redis comes from Bitnami's charts or outside"
    assert (CHART / "templates" / "NOTES.txt").is_file()


def test_values_schema_is_valid_and_accepts_the_defaults() -> None:
    jsonschema = pytest.importorskip("jsonschema")
    schema = json.loads((CHART / "values.schema.json").read_text())
    jsonschema.Draft7Validator.check_schema(schema)
    defaults = yaml.safe_load((CHART / "values.yaml").read_text())
    jsonschema.validate(defaults, schema)


# ---- helm lint ------------------------------------------------------------------------------


def _lint_problems(helm: ModuleType, values: dict[str, Any] | None) -> list[str]:
    report = helm.lint(str(CHART), values, namespace=NAMESPACE)
    assert report["total_charts_linted"] == 1
    tolerate_missing = not (CHART / "charts").exists()
    problems = []
    for message in report["messages"]:
        if message["severity"] < 2:  # info, e.g. "icon is recommended"
            continue
        if tolerate_missing and message["severity"] == 2 and MISSING_DEPENDENCIES in message["error"]:
            continue
        problems.append(f"[{message['severity']}] {message['path']}: {message['error']}")
    return problems


def test_lint_with_the_chart_defaults(helm: ModuleType) -> None:
    assert _lint_problems(helm, None) == []


@values_files
def test_lint_with_ci_values(helm: ModuleType, values_file: Path) -> None:
    assert _lint_problems(helm, _values(values_file)) == []


@pytest.mark.parametrize(
    "bad",
    [
        {"image": {"pullPolicy": "Sometimes"}},
        {"gateway": {"terminationGracePeriodSeconds": 10}},
        {"gateway": {"port": 0}},
        {"config": {"env": {"PATH": "/tmp"}}},
        {"tokens": {"pairs": ["no-colon-here"]}},
        {"redis": {"url": "http://not-redis"}},
        {"gatewy": {"replicas": 3}},
    ],
    ids=["pull-policy", "grace-period", "port", "non-hookbus-env", "token-pair", "redis-url", "typo"],
)
def test_lint_rejects_values_the_schema_forbids(helm: ModuleType, bad: dict[str, Any]) -> None:
    report = helm.lint(str(CHART), bad, namespace=NAMESPACE)
    assert any(m["severity"] == 3 for m in report["messages"]), report


# ---- rendered manifests ---------------------------------------------------------------------


@values_files
@pytest.mark.parametrize("kube_version", KUBE_VERSIONS)
def test_manifests_match_kubernetes_schemas(
    helm: ModuleType, kube_validate: ModuleType, values_file: Path, kube_version: str
) -> None:
    version = kube_validate.latest_version() if kube_version == "latest" else kube_version
    errors = []
    for doc in render(helm, _values(values_file)):
        if doc["apiVersion"].startswith("monitoring.coreos.com/"):
            continue  # a CRD: checked by test_service_monitor below
        try:
            kube_validate.validate(doc, version, strict=True)
        except kube_validate.ValidationError as exc:
            path = "/".join(str(p) for p in exc.path)
            errors.append(f"{doc['kind']}/{doc['metadata']['name']} at {path}: {exc.message}")
    assert errors == []


@values_files
def test_every_object_carries_the_standard_labels(helm: ModuleType, values_file: Path) -> None:
    for doc in render(helm, _values(values_file)):
        labels = doc["metadata"].get("labels", {})
        where = f"{doc['kind']}/{doc['metadata']['name']}"
        assert all(labels.get(key) for key in STANDARD_LABELS), where
        assert labels["app.kubernetes.io/name"] == "hookbus", where
        assert labels["app.kubernetes.io/instance"] == RELEASE, where
        assert labels["app.kubernetes.io/managed-by"] == "Helm", where
        assert doc["metadata"]["namespace"] == NAMESPACE, where


@values_files
def test_deployments_are_hardened_probed_and_sized(helm: ModuleType, values_file: Path) -> None:
    values = _values(values_file)
    docs = render(helm, values)
    assert not objects(docs, "StatefulSet")
    assert set(objects(docs, "Deployment")) == {f"{RELEASE}-hookbus-{role}" for role in ROLES}
    parser = build_parser()
    for role in ROLES:
        dep = deployment(docs, role)
        pod = dep["spec"]["template"]
        selector = dep["spec"]["selector"]["matchLabels"]
        assert set(selector) == set(SELECTOR_LABELS), role
        assert selector["app.kubernetes.io/instance"] == RELEASE
        assert selector["app.kubernetes.io/component"] == role
        assert selects(selector, pod["metadata"]["labels"]), role
        spec = pod["spec"]
        assert spec["automountServiceAccountToken"] is False
        assert spec["terminationGracePeriodSeconds"] >= 30
        assert spec["securityContext"]["runAsNonRoot"] is True
        assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        ctr = container(dep)
        sc = ctr["securityContext"]
        assert sc["allowPrivilegeEscalation"] is False
        assert sc["readOnlyRootFilesystem"] is True
        assert sc["runAsNonRoot"] is True
        assert sc["capabilities"]["drop"] == ["ALL"]
        assert sc["seccompProfile"] == {"type": "RuntimeDefault"}
        for kind in ("requests", "limits"):
            assert {"cpu", "memory"} <= set(ctr["resources"][kind]), (role, kind)
        volumes = {v["name"]: v for v in spec["volumes"]}
        mounts = {m["mountPath"]: m["name"] for m in ctr["volumeMounts"]}
        assert "emptyDir" in volumes[mounts["/tmp"]], role
        assert "configMap" in volumes[mounts["/etc/hookbus"]], role

        # The container's arguments are a valid hookbus command line for its role, and the
        # port it binds is the port declared, probed and scraped.
        args = parser.parse_args(ctr["args"])
        assert args.command == role
        ports = {p["name"]: p["containerPort"] for p in ctr["ports"]}
        annotations = pod["metadata"]["annotations"]
        if role == "gateway":
            assert args.host == "0.0.0.0"
            assert ports == {"http": args.port}
            probes = {"http": ("/healthz", "/readyz")}
        else:
            assert ports == {"metrics": args.metrics_port}
            probes = {"metrics": ("/healthz", "/metrics")}
        ((port_name, (live, ready)),) = probes.items()
        assert ctr["livenessProbe"]["httpGet"] == {"path": live, "port": port_name}
        assert ctr["readinessProbe"]["httpGet"] == {"path": ready, "port": port_name}
        assert ctr["startupProbe"]["httpGet"]["port"] == port_name
        assert annotations["prometheus.io/port"] == str(ports[port_name])

        env = env_of(dep)
        assert env["HOOKBUS_CONFIG"]["value"].startswith("/etc/hookbus/")
        assert ("HOOKBUS_TOKENS" in env) == (role == "gateway"), "tokens go to the gateway only"
        defined: set[str] = set()
        for item in ctr["env"]:
            value = item.get("value", "")
            assert "://" not in value or "$(HOOKBUS_REDIS_PASSWORD)" in value or "@" not in value, (
                f"{role}: credentials in a plain env value ({item['name']})"
            )
            for ref in re.findall(r"\$\((\w+)\)", value):
                assert ref in defined, f"{role}: $({ref}) used before it is defined"
            defined.add(item["name"])


@values_files
def test_references_between_objects_resolve(helm: ModuleType, values_file: Path) -> None:
    values = _values(values_file)
    docs = render(helm, values)
    deployments = objects(docs, "Deployment")
    pods = {name: d["spec"]["template"]["metadata"]["labels"] for name, d in deployments.items()}
    external_secrets = {
        name
        for name in (
            values.get("tokens", {}).get("existingSecret"),
            values.get("replyKey", {}).get("existingSecret"),
            values.get("redis", {}).get("existingSecret"),
            values.get("redis", {}).get("queue", {}).get("existingSecret"),
        )
        if name
    }
    secrets = set(objects(docs, "Secret")) | external_secrets
    config_maps = set(objects(docs, "ConfigMap")) | {values.get("policy", {}).get("existingConfigMap")}
    service_accounts = set(objects(docs, "ServiceAccount")) | {values.get("serviceAccount", {}).get("name")}
    for name, dep in deployments.items():
        spec = dep["spec"]["template"]["spec"]
        assert spec["serviceAccountName"] in service_accounts, name
        for item in container(dep)["env"]:
            ref = item.get("valueFrom", {}).get("secretKeyRef")
            if ref:
                assert ref["name"] in secrets, (name, item["name"])
        for volume in spec["volumes"]:
            if "configMap" in volume:
                assert volume["configMap"]["name"] in config_maps, name

    for name, svc in objects(docs, "Service").items():
        matched = [d for d, labels in pods.items() if selects(svc["spec"]["selector"], labels)]
        assert len(matched) == 1, (name, matched)
        port_names = {p["name"] for p in container(deployments[matched[0]])["ports"]}
        assert {p["targetPort"] for p in svc["spec"]["ports"]} <= port_names, name
        if name.endswith("-gateway"):
            assert svc["spec"]["type"] in {"ClusterIP", "NodePort", "LoadBalancer"}
        else:
            assert svc["spec"]["clusterIP"] == "None", f"{name}: headless metrics service"

    pdbs = objects(docs, "PodDisruptionBudget")
    assert len(pdbs) == 3
    for name, pdb in pdbs.items():
        assert [d for d, labels in pods.items() if selects(pdb["spec"]["selector"]["matchLabels"], labels)] == [name]

    for name, hpa in objects(docs, "HorizontalPodAutoscaler").items():
        assert hpa["apiVersion"] == "autoscaling/v2"
        target = hpa["spec"]["scaleTargetRef"]
        assert target["kind"] == "Deployment" and target["name"] in deployments
        assert "replicas" not in deployments[target["name"]]["spec"], "the HPA owns the replica count"
        assert hpa["spec"]["metrics"], name

    services = objects(docs, "Service")
    for ingress in objects(docs, "Ingress").values():
        for rule in ingress["spec"]["rules"]:
            for path in rule["http"]["paths"]:
                backend = path["backend"]["service"]
                assert backend["name"] == f"{RELEASE}-hookbus-gateway"
                assert backend["port"]["name"] in {p["name"] for p in services[backend["name"]]["spec"]["ports"]}


def test_ingress_and_autoscaling(helm: ModuleType) -> None:
    docs = render(helm, _values(CI_DIR / "ingress-hpa-values.yaml"))
    hpas = objects(docs, "HorizontalPodAutoscaler")
    assert set(hpas) == {f"{RELEASE}-hookbus-gateway", f"{RELEASE}-hookbus-dispatcher"}
    gateway_metrics = {m["resource"]["name"] for m in hpas[f"{RELEASE}-hookbus-gateway"]["spec"]["metrics"]}
    assert gateway_metrics == {"cpu", "memory"}
    assert "replicas" in deployment(docs, "worker")["spec"]
    (ingress,) = objects(docs, "Ingress").values()
    assert ingress["spec"]["ingressClassName"] == "nginx"
    assert ingress["spec"]["tls"][0]["secretName"] == "hookbus-ci-tls"
    paths = [p["path"] for r in ingress["spec"]["rules"] for p in r["http"]["paths"]]
    assert paths == ["/v1/hooks"], "only the hook API is exposed"
    pdb = objects(docs, "PodDisruptionBudget")[f"{RELEASE}-hookbus-dispatcher"]
    assert pdb["spec"] == {"minAvailable": 1, "selector": pdb["spec"]["selector"]}


def test_service_monitor(helm: ModuleType) -> None:
    assert not objects(render(helm, {}), "ServiceMonitor"), "off by default"
    docs = render(helm, _values(CI_DIR / "ingress-hpa-values.yaml"))
    (monitor,) = objects(docs, "ServiceMonitor").values()
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": [NAMESPACE]}
    selector = monitor["spec"]["selector"]
    (expression,) = selector["matchExpressions"]
    selected = {
        name: svc
        for name, svc in objects(docs, "Service").items()
        if selects(selector["matchLabels"], svc["metadata"]["labels"])
        and svc["metadata"]["labels"][expression["key"]] in expression["values"]
    }
    assert set(selected) == {f"{RELEASE}-hookbus-{role}" for role in ROLES}
    endpoint_ports = {e["port"] for e in monitor["spec"]["endpoints"]}
    for name, svc in selected.items():
        assert endpoint_ports & {p["name"] for p in svc["spec"]["ports"]}, f"{name} is never scraped"
    assert all(e["path"] == "/metrics" for e in monitor["spec"]["endpoints"])


def test_two_releases_in_one_namespace_do_not_collide(helm: ModuleType) -> None:
    alpha, beta = render(helm, {}, name="alpha"), render(helm, {}, name="beta")
    assert not {(d["kind"], d["metadata"]["name"]) for d in alpha} & {(d["kind"], d["metadata"]["name"]) for d in beta}
    beta_pods = [d["spec"]["template"]["metadata"]["labels"] for d in objects(beta, "Deployment").values()]
    for dep in objects(alpha, "Deployment").values():
        assert not any(selects(dep["spec"]["selector"]["matchLabels"], labels) for labels in beta_pods)
    for svc in objects(alpha, "Service").values():
        assert not any(selects(svc["spec"]["selector"], labels) for labels in beta_pods)


# ---- Redis and tokens -----------------------------------------------------------------------


def _secret(docs: list[dict[str, Any]], name: str) -> dict[str, str]:
    data = objects(docs, "Secret")[name]["data"]
    return {k: base64.b64decode(v).decode() for k, v in data.items()}


def test_external_redis_url_lives_in_a_secret(helm: ModuleType) -> None:
    docs = render(helm, {"redis": {"url": "redis://:pw@redis.example:6379/2"}})
    assert _secret(docs, f"{RELEASE}-hookbus-redis") == {"url": "redis://:pw@redis.example:6379/2"}
    for role in ROLES:
        env = env_of(deployment(docs, role))
        ref = env["HOOKBUS_REDIS_URL"]["valueFrom"]["secretKeyRef"]
        assert ref == {"name": f"{RELEASE}-hookbus-redis", "key": "url"}
        assert "HOOKBUS_REDIS_CLUSTER" not in env and "HOOKBUS_QUEUE_REDIS_URL" not in env


def test_external_redis_cluster_with_a_separate_queue_redis(helm: ModuleType) -> None:
    values = _values(CI_DIR / "cluster-values.yaml")
    docs = render(helm, values)
    assert _secret(docs, f"{RELEASE}-hookbus-redis") == {
        "url": values["redis"]["url"],
        "queue-url": values["redis"]["queue"]["url"],
    }
    for role in ROLES:
        env = env_of(deployment(docs, role))
        assert env["HOOKBUS_REDIS_CLUSTER"]["value"] == "true"
        assert env["HOOKBUS_QUEUE_REDIS_URL"]["valueFrom"]["secretKeyRef"]["key"] == "queue-url"
        assert env["HOOKBUS_KEY_PREFIX"]["value"] == "hb-ci:"
        assert env["HOOKBUS_DISPATCH_CONCURRENCY"]["value"] == "128"
    assert "Redis: url (Redis Cluster)" in notes(helm, values)
    assert "does not support Redis Cluster" not in notes(helm, values)


def test_existing_secrets_are_referenced_not_created(helm: ModuleType) -> None:
    docs = render(helm, _values(CI_DIR / "external-secret-values.yaml"))
    assert not objects(docs, "Secret"), "every credential comes from outside the chart"
    assert not objects(docs, "ConfigMap"), "the policy comes from an existing ConfigMap"
    assert not objects(docs, "ServiceAccount")
    gateway = deployment(docs, "gateway")
    env = env_of(gateway)
    assert env["HOOKBUS_REDIS_URL"]["valueFrom"]["secretKeyRef"] == {"name": "hookbus-redis", "key": "url"}
    assert env["HOOKBUS_QUEUE_REDIS_URL"]["valueFrom"]["secretKeyRef"] == {"name": "hookbus-redis", "key": "queue-url"}
    assert env["HOOKBUS_TOKENS"]["valueFrom"]["secretKeyRef"] == {"name": "hookbus-tokens", "key": "tokens"}
    assert env["HOOKBUS_REPLY_KEY"]["valueFrom"]["secretKeyRef"] == {"name": "hookbus-reply-key", "key": "reply-key"}
    assert container(gateway)["image"] == (
        "registry.example.com/platform/hookbus@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
    )
    assert gateway["spec"]["template"]["spec"]["imagePullSecrets"] == [{"name": "registry-credentials"}]


@pytest.mark.parametrize(
    ("values", "host", "secret", "cluster"),
    [
        ({"redis": {"enabled": True}}, f"{RELEASE}-redis-master", f"{RELEASE}-redis", False),
        ({"redis-cluster": {"enabled": True}}, f"{RELEASE}-redis-cluster", f"{RELEASE}-redis-cluster", True),
    ],
    ids=["bitnami-redis", "bitnami-redis-cluster"],
)
def test_bundled_bitnami_redis_wiring(
    helm: ModuleType, values: dict[str, Any], host: str, secret: str, cluster: bool
) -> None:
    docs = render(helm, values)
    assert f"{RELEASE}-hookbus-redis" not in objects(docs, "Secret")
    for role in ROLES:
        env = env_of(deployment(docs, role))
        password = env["HOOKBUS_REDIS_PASSWORD"]["valueFrom"]["secretKeyRef"]
        assert password == {"name": secret, "key": "redis-password"}
        assert env["HOOKBUS_REDIS_URL"]["value"] == f"redis://:$(HOOKBUS_REDIS_PASSWORD)@{host}:6379/0"
        assert ("HOOKBUS_REDIS_CLUSTER" in env) == cluster
    if cluster:
        assert "does not support Redis Cluster" in notes(helm, values)


def test_rendering_fails_without_any_redis(helm: ModuleType) -> None:
    with pytest.raises(helm.HelmError, match="no Redis configured"):
        render(helm, {"redis": {"url": ""}})


def test_tokens(helm: ModuleType) -> None:
    docs = render(helm, {"tokens": {"pairs": ["fleet-a:token-a", "fleet-b:token-b"]}})
    assert _secret(docs, f"{RELEASE}-hookbus-tokens") == {"tokens": "fleet-a:token-a\nfleet-b:token-b"}

    generated = _secret(render(helm, {}), f"{RELEASE}-hookbus-tokens")["tokens"]
    assert re.fullmatch(r"default:[A-Za-z0-9]{40}", generated)
    assert "get secret hb-hookbus-tokens" in notes(helm, {})

    with pytest.raises(helm.HelmError, match="the gateway needs tokens"):
        render(helm, {"tokens": {"generate": False}})


def test_reply_key(helm: ModuleType) -> None:
    docs = render(helm, {})
    generated = _secret(docs, f"{RELEASE}-hookbus-reply-key")["reply-key"]
    assert re.fullmatch(r"[A-Za-z0-9]{64}", generated)
    ref = {"name": f"{RELEASE}-hookbus-reply-key", "key": "reply-key"}
    for role in ("gateway", "dispatcher"):  # the two that make and check replies; the worker does not
        assert env_of(deployment(docs, role))["HOOKBUS_REPLY_KEY"]["valueFrom"]["secretKeyRef"] == ref
    assert "HOOKBUS_REPLY_KEY" not in env_of(deployment(docs, "worker"))

    own = render(helm, {"replyKey": {"existingSecret": "mine", "existingSecretKey": "k"}})
    assert f"{RELEASE}-hookbus-reply-key" not in objects(own, "Secret")
    assert env_of(deployment(own, "dispatcher"))["HOOKBUS_REPLY_KEY"]["valueFrom"]["secretKeyRef"] == {
        "name": "mine",
        "key": "k",
    }
