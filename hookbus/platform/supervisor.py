"""``hookbus up``: the whole platform in the foreground.

One platform per state folder: ``up`` first takes the folder's lock (:mod:`hookbus.platform.state`)
and refuses, naming the running one, when another ``up`` holds it. It checks that the
gateway's port is free, starts an embedded Redis when no URL is given, then one gateway, N
dispatchers and one async worker as child processes sharing a Prometheus multiprocess
directory (so the gateway's ``/metrics`` shows every role), and a reply key made for this run
(``HOOKBUS_REPLY_KEY``, :mod:`bus.runtime.replykey`) in their environment only, unless one is
set. What runs is kept in the state file for ``hookbus status`` and ``hookbus stop``.

A role that exits is restarted after a backoff (0.5 s, doubling, at most 10 s); every restart
is logged and counted in ``hookbus_role_restarts_total{role}``. More than ``restart_limit``
restarts of one role within a minute is a crash loop: everything stops with a message. A role
that exits with a configuration error (:data:`hookbus.platform.state.EXIT_CONFIG`, after saying why)
stops everything at once: a restart would fail the same way.
SIGHUP reloads the policy in every role (it is forwarded to each child) and keeps running.
Ctrl-C or SIGTERM stops the children in order (gateway first, Redis last). Children get
SIGTERM if this process is killed.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bus.errors import ConfigError, PolicyError
from bus.policy.loading import Policy, load_policy
from bus.policy.reload import stamp
from bus.redis.urls import mask_url
from bus.runtime.children import die_with_parent
from bus.runtime.replykey import new_secret
from bus.runtime.settings import Settings
from hookbus.platform.redis_server import EmbeddedRedis
from hookbus.platform.state import (
    EXIT_CONFIG,
    LOCK_NAME,
    STATE_NAME,
    SUPERVISOR_ENV,
    FolderLock,
    describe_holder,
    remove_state,
    write_json,
)

RESTART_LIMIT = 5
RESTART_WINDOW_S = 60.0
BACKOFF_FIRST_S = 0.5
BACKOFF_MAX_S = 10.0
_TICK_S = 0.1


def say(*args: object, **kwargs: Any) -> None:
    """print(), but a closed terminal (EIO, EPIPE) never stops the platform."""
    with contextlib.suppress(OSError):
        print(*args, **kwargs)


def _role_preexec() -> None:
    die_with_parent()
    # A SIGHUP that arrives before the role has installed its reload handler must not end it.
    signal.signal(signal.SIGHUP, signal.SIG_IGN)


def exit_text(code: int) -> str:
    """``exit code 1`` or ``killed by SIGKILL`` for a child's return code."""
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


@dataclasses.dataclass
class Role:
    """One child process slot: what it runs, the process (None while it waits to restart)."""

    name: str
    args: list[str]
    process: subprocess.Popen[bytes] | None = None
    start_at: float = 0.0
    restarts: int = 0


class Supervisor:
    """The running platform: its roles, their restarts, the state file."""

    def __init__(self, settings: Settings, policy: Policy | None, dispatchers: int, restart_limit: int) -> None:
        self.settings = settings
        self.policy = policy
        self.restart_limit = restart_limit
        self.state_dir = Path(settings.state_dir).resolve()
        self.env: dict[str, str] = {}
        self.redis: EmbeddedRedis | None = None
        self.redis_url = settings.redis_url or ""
        self.crashes: dict[str, collections.deque[float]] = collections.defaultdict(collections.deque)
        config = [arg for path in settings.policy_paths for arg in ("--config", path)]
        gateway_args = [*config, "--host", settings.host, "--port", str(settings.port)]
        if settings.insecure:
            gateway_args.append("--insecure")
        self.roles = [Role("gateway", gateway_args)]
        self.roles += [Role("dispatcher", config) for _ in range(max(1, dispatchers))]
        self.roles.append(Role("worker", config))
        self._policy_stamp = stamp(settings.policy_paths)

    # -- the state file -------------------------------------------------------------------

    def write_state(self, status: str) -> None:
        policy = self.policy
        write_json(
            self.state_dir / STATE_NAME,
            {
                "status": status,
                "pid": os.getpid(),
                "state_dir": str(self.state_dir),
                "host": self.settings.host,
                "port": self.settings.port,
                "url": f"http://{self.settings.host}:{self.settings.port}",
                "redis": {
                    "url": mask_url(self.redis_url) if self.redis_url else None,
                    "embedded": self.redis is not None,
                    "pid": self.redis.pid if self.redis else None,
                },
                "policy": {
                    "revision": policy.revision if policy else None,
                    "files": list(self.settings.policy_paths),
                    "handlers": policy.handler_count if policy else 0,
                },
                "roles": [
                    {"role": role.name, "pid": role.process.pid if role.process else None, "restarts": role.restarts}
                    for role in self.roles
                ],
            },
        )

    # -- children -------------------------------------------------------------------------

    def start_role(self, role: Role) -> None:
        role.process = subprocess.Popen(
            [sys.executable, "-m", "hookbus", role.name, *role.args],
            env=self.env,
            stdin=subprocess.DEVNULL,
            preexec_fn=_role_preexec,
            process_group=0,  # Ctrl-C reaches only this process, which stops the children in order
        )

    def reap(self, role: Role, now: float) -> str | None:
        """Schedule the restart of a role that exited; returns a message when it is crash-looping."""
        assert role.process is not None
        code, pid = role.process.returncode, role.process.pid
        role.process = None
        from prometheus_client import multiprocess

        # Its live gauges (policy revision, the observer's) must not outlive it; counters stay.
        multiprocess.mark_process_dead(pid, self.env.get("PROMETHEUS_MULTIPROC_DIR"))  # type: ignore[no-untyped-call]
        if code == EXIT_CONFIG:  # it said why on stderr; a restart would fail the same way
            return f"{role.name} (pid {pid}) cannot run with this configuration; stopping everything"
        crashes = self.crashes[role.name]
        crashes.append(now)
        while crashes and now - crashes[0] > RESTART_WINDOW_S:
            crashes.popleft()
        if len(crashes) > self.restart_limit:
            return (
                f"{role.name} exited {len(crashes)} times within {RESTART_WINDOW_S:g}s (last: pid {pid}, "
                f"{exit_text(code)}); giving up and stopping everything"
            )
        delay = min(BACKOFF_MAX_S, BACKOFF_FIRST_S * 2 ** (len(crashes) - 1))
        role.start_at, role.restarts = now + delay, role.restarts + 1
        from bus.runtime.metrics import process_metrics

        metrics = process_metrics()
        metrics.child(metrics.role_restarts, role.name).inc()
        say(
            f"hookbus: {role.name} (pid {pid}) exited ({exit_text(code)}); restarting it in {delay:g}s "
            f"(restart {len(crashes)} of at most {self.restart_limit} within {RESTART_WINDOW_S:g}s)",
            file=sys.stderr,
            flush=True,
        )
        return None

    def stop_roles(self, timeout_s: float = 10.0) -> None:
        """Stop the gateway first (no new work), then the dispatchers and the worker."""
        for name in ("gateway", "dispatcher", "worker"):
            group = [role.process for role in self.roles if role.name == name and role.process is not None]
            for process in group:
                if process.poll() is None:
                    process.send_signal(signal.SIGTERM)
            deadline = time.monotonic() + timeout_s
            for process in group:
                try:
                    process.wait(max(0.1, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()

    def reload(self, forward: bool) -> None:
        """Re-read the policy (for the state file); with ``forward``, SIGHUP every role."""
        self._policy_stamp = stamp(self.settings.policy_paths)
        if forward:
            say("hookbus: SIGHUP: reloading the policy in every role", file=sys.stderr, flush=True)
            for role in self.roles:
                if role.process is not None and role.process.poll() is None:
                    role.process.send_signal(signal.SIGHUP)
        if self.settings.policy_paths:
            try:
                self.policy = load_policy(self.settings.policy_paths)
            except PolicyError:
                pass  # every role reports the problems and keeps its running policy
        self.write_state("running")

    # -- the run --------------------------------------------------------------------------

    def start(self) -> None:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.write_state("starting")
        if not self.redis_url:
            self.redis = EmbeddedRedis(self.state_dir / "redis").start()
            self.redis_url = self.redis.url
            say(
                f"hookbus: embedded Redis {self.redis.url} (pid {self.redis.pid}, data in {self.redis.state_dir})",
                flush=True,
            )
        else:
            say(f"hookbus: using Redis at {mask_url(self.redis_url)}", flush=True)
        metrics_dir = self.state_dir / "metrics"
        shutil.rmtree(metrics_dir, ignore_errors=True)
        metrics_dir.mkdir(parents=True)
        _count_restarts_in(metrics_dir)
        self.env = {
            **os.environ,
            "HOOKBUS_REDIS_URL": self.redis_url,
            "PROMETHEUS_MULTIPROC_DIR": str(metrics_dir),
            SUPERVISOR_ENV: str(os.getpid()),
        }
        # Every role shares this machine: the async worker takes only the CPU the decision path
        # leaves (workers.jobs.worker.set_cpu_priority), unless told otherwise.
        self.env.setdefault("HOOKBUS_WORKER_CPU", "idle")
        if self.settings.reply_key is None:
            # The gateway and dispatchers authenticate replies with it: made here for this run,
            # it lives only in the roles' environment (never in a file, a log line or Redis).
            self.env["HOOKBUS_REPLY_KEY"] = new_secret()
        for role in self.roles:
            self.start_role(role)
        self.write_state("running")
        say(
            f"hookbus: gateway on http://{self.settings.host}:{self.settings.port}/v1/hooks, "
            f"{len(self.roles) - 2} dispatcher(s), 1 async worker. Ctrl-C stops everything.",
            flush=True,
        )
        say(
            f"hookbus: metrics of every role on http://{self.settings.host}:{self.settings.port}/metrics "
            "(Prometheus: deploy/prometheus/prometheus-up.yml)",
            flush=True,
        )
        say(
            f"hookbus: console (live decisions, policy what-if) on http://{self.settings.host}:{self.settings.port}/ui",
            flush=True,
        )

    def run(self, flags: dict[str, bool]) -> int:
        """Watch the roles until ``flags["stop"]``; ``flags["hup"]`` asks for a reload."""
        last_stamp_check = time.monotonic()
        while not flags["stop"]:
            now = time.monotonic()
            if flags["hup"]:
                flags["hup"] = False
                self.reload(forward=True)
            elif now - last_stamp_check > 1.0:
                last_stamp_check = now
                if stamp(self.settings.policy_paths) != self._policy_stamp:
                    self.reload(forward=False)  # the roles see the edit themselves
            changed = False
            for role in self.roles:
                if role.process is not None and role.process.poll() is not None:
                    if (message := self.reap(role, now)) is not None:
                        say(f"hookbus: {message}", file=sys.stderr, flush=True)
                        return 1
                    changed = True
                elif role.process is None and now >= role.start_at:
                    self.start_role(role)
                    changed = True
            if changed:
                self.write_state("running")
            time.sleep(_TICK_S)
        return 0

    def close(self) -> None:
        self.stop_roles()
        if self.redis is not None:
            self.redis.stop()


def _count_restarts_in(metrics_dir: Path) -> None:
    """Count this process's restarts in the roles' multiprocess directory (so /metrics shows them)."""
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(metrics_dir)
    from prometheus_client import values

    values.ValueClass = values.get_value_class()  # type: ignore[no-untyped-call]
    from bus.runtime.metrics import ROLES, process_metrics

    metrics = process_metrics()
    for role in ROLES:
        metrics.child(metrics.role_restarts, role)


def run_platform(
    settings: Settings,
    dispatchers: int = 1,
    policy: Policy | None = None,
    restart_limit: int = RESTART_LIMIT,
    warning: str | None = None,
) -> int:
    """Run everything until Ctrl-C / SIGTERM; returns the exit code.

    ``warning`` is printed once the state folder and the port are known to be free.
    """
    from gateway.server import bind_socket, check_bind

    check_bind(settings)
    state_dir = Path(settings.state_dir).resolve()
    lock = FolderLock(state_dir / LOCK_NAME)
    if not lock.acquire():
        raise ConfigError(
            f"a platform is already running from {state_dir} ({describe_holder(state_dir)}): "
            f"'hookbus stop --state-dir {settings.state_dir}' stops it; pass another --state-dir to run a second one"
        )
    flags = {"stop": False, "hup": False}

    def on_signal(signum: int, frame: Any) -> None:
        flags["hup" if signum == signal.SIGHUP else "stop"] = True

    supervisor = Supervisor(settings, policy, dispatchers, restart_limit)
    try:
        bind_socket(settings.host, settings.port).close()  # a port in use is one line, before anything starts
        if warning:
            say(warning, file=sys.stderr, flush=True)
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, on_signal)
        try:
            supervisor.start()
            return supervisor.run(flags)
        finally:
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            supervisor.close()
            say("hookbus: stopped", flush=True)
    finally:
        remove_state(state_dir)
        lock.release()


__all__ = ["RESTART_LIMIT", "Role", "Supervisor", "exit_text", "run_platform"]
