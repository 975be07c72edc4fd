"""What each ``hookbus`` sub-command does; errors become a message and an exit code here."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
from typing import TYPE_CHECKING, Any

from bus.errors import ConfigError, HookBusError, PolicyError
from bus.runtime.settings import Settings
from hookbus.platform.state import EXIT_CONFIG, SUPERVISOR_ENV

if TYPE_CHECKING:
    from bus.policy.loading import Policy
    from bus.redis.keys import Keyspace

logger = logging.getLogger("hookbus")


def _settings(args: argparse.Namespace) -> Settings:
    return Settings.from_env(
        redis_url=getattr(args, "redis_url", None),
        queue_redis_url=getattr(args, "queue_redis_url", None),
        policy_paths=tuple(args.config) if getattr(args, "config", None) else None,
        host=getattr(args, "host", None),
        port=getattr(args, "port", None),
        insecure=getattr(args, "insecure", None),
        state_dir=getattr(args, "state_dir", None),
        key_prefix=getattr(args, "key_prefix", None),
        metrics_host=getattr(args, "metrics_host", None),
        log_format=getattr(args, "log_format", None),
        redis_cluster=getattr(args, "redis_cluster", None),
        dispatch_partitions=getattr(args, "partitions", None),
    )


def _setup_logging(settings: Settings) -> None:
    from bus.redaction.redact import install_log_redaction
    from bus.runtime.logs import setup_logging

    setup_logging(settings.log_level, settings.log_format)
    install_log_redaction()  # no secret in a log line, a traceback included


def _approvals_store(args: argparse.Namespace) -> tuple[str, Keyspace]:
    settings = _settings(args)
    return _require_redis(settings, embedded_ok=True), settings.keys


def _require_redis(settings: Settings, *, embedded_ok: bool = False) -> str:
    if settings.redis_url:
        return settings.redis_url
    if embedded_ok:  # the Redis of the `hookbus up` that runs from the state folder
        from hookbus.platform.state import running

        state = running(settings.state_dir)
        url = ((state or {}).get("redis") or {}).get("url")
        if isinstance(url, str) and "***" not in url:
            return url
        if isinstance(url, str):  # the state file never holds a password
            raise ConfigError(
                f"the platform running from {os.path.abspath(settings.state_dir)} uses {url}; "
                "pass --redis-url with its password"
            )
        socket = os.path.join(settings.state_dir, "redis", "redis.sock")
        if os.path.exists(socket):
            return f"unix://{os.path.abspath(socket)}"
        raise ConfigError(
            f"no Redis: nothing runs from {os.path.abspath(settings.state_dir)}; pass --state-dir "
            "(where 'hookbus up' runs) or --redis-url"
        )
    raise ConfigError("no Redis: pass --redis-url or set HOOKBUS_REDIS_URL (or use 'hookbus up')")


def _empty_warning(settings: Settings, policy: Policy) -> str | None:
    """The warning that a platform without a policy answers every event with no opinion."""
    if not policy.empty or os.environ.get(SUPERVISOR_ENV):  # under `hookbus up`, up has said it
        return None
    if not settings.policy_paths:
        why = "no policy (no --config and no HOOKBUS_CONFIG)"
    else:
        why = f"the policy ({', '.join(settings.policy_paths)}) has no handlers"
    return f"hookbus: warning: {why}: every event will get no opinion"


def _import_path() -> None:
    """Find ``function`` and plugin modules from the working directory, as under ``hookbus up``."""
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())


def run_command_line(args: argparse.Namespace) -> int:
    """Run a parsed command line; returns the exit code."""
    try:
        return _dispatch(args)
    except PolicyError as exc:
        for problem in exc.problems:
            print(str(problem), file=sys.stderr)
        return 1
    except HookBusError as exc:
        print(f"hookbus: {exc}", file=sys.stderr)
        if isinstance(exc, ConfigError) and os.environ.get(SUPERVISOR_ENV):
            return EXIT_CONFIG  # a role of `hookbus up`: restarting it would only fail again
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `hookbus tail | head`: the reader left, which is not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


def _dispatch(args: argparse.Namespace) -> int:
    if args.command == "policy" and args.policy_command == "keygen":  # needs no Redis
        from hookbus.tenancy import keygen_command

        return keygen_command(args)
    if args.command == "policy" and args.policy_command == "replay":
        from hookbus.replay.run import replay_command

        settings = _settings(args)
        return replay_command(args, settings, _require_redis(settings, embedded_ok=True))
    if args.command == "policy" and args.policy_command in ("test", "lint", "coverage"):
        from hookbus.policytools import command as tools

        if args.policy_command == "coverage":
            settings = _settings(args)
            return tools.coverage_policy(args, settings, _require_redis(settings, embedded_ok=True))
        return tools.run_policy_tests(args) if args.policy_command == "test" else tools.lint_policy(args)
    if args.command == "policy" and args.policy_command != "check":
        from hookbus.tenancy import policy_command

        settings = _settings(args)
        return policy_command(
            args, _require_redis(settings, embedded_ok=True), settings.keys, settings.policy_trusted_keys
        )
    if args.command == "tokens":
        from hookbus.tenancy import tokens_command

        settings = _settings(args)
        return tokens_command(args, _require_redis(settings, embedded_ok=True), settings.keys)
    if args.command == "policy":
        return policy_check(args.files, strict=args.strict)
    if args.command == "emit":
        return emit(args)
    if args.command == "approvals":
        from hookbus.approvals import approvals_command

        return approvals_command(args, lambda: _approvals_store(args))
    if args.command in ("freeze", "unfreeze"):
        from hookbus.freeze import freeze_command

        return freeze_command(args)
    if args.command == "install":
        from hookbus.install.command import run_install

        return run_install(args)
    settings = _settings(args)
    _setup_logging(settings)
    if args.command in ("gateway", "dispatcher"):
        settings.require_reply_key()  # every role of a bus shares it: never one of a process's own
    if args.command in ("gateway", "dispatcher", "worker"):
        from bus.runtime import tracing

        tracing.configure(settings.tracing, args.command)
    if args.command == "dlq":
        from hookbus.dlq import dlq_command

        # The async dead letters live with the queue: on its own Redis when there is one; a
        # cluster bus without one is the same ConfigError as the dispatcher's and the worker's.
        queue_url = settings.queue_redis_url or settings.queue_url_for(_require_redis(settings, embedded_ok=True))
        return dlq_command(args, settings.keys, queue_url)
    if args.command == "tail":
        from bus.decisionlog.audit import RecordFilter
        from hookbus.tail import tail

        filters = RecordFilter.of(
            sessions=args.session, tenants=args.tenant, events=args.event, decisions=args.decision, agents=args.agent
        )
        asyncio.run(
            tail(
                _require_redis(settings, embedded_ok=True),
                settings.keys,
                as_json=args.json,
                from_start=args.from_start,
                count=args.count,
                filters=filters,
            )
        )
        return 0
    if args.command == "audit" and args.audit_command in ("archive", "query"):
        try:
            from hookbus.audit.archive import archive_command
            from hookbus.audit.query import query_command
        except ImportError as exc:  # pyarrow or duckdb
            raise ConfigError(
                f"hookbus audit {args.audit_command} needs pip install 'hookbus[archive]' ({exc})"
            ) from exc
        if args.audit_command == "archive":
            return archive_command(args, _require_redis(settings, embedded_ok=True), settings.keys)
        redis_url = None if args.no_redis else _require_redis(settings, embedded_ok=True)
        return query_command(args, redis_url, settings.keys)
    if args.command == "audit":
        from hookbus.audit.command import export_command, follow_command

        if args.audit_command == "verify":
            from hookbus.audit.verify import verify_command

            return verify_command(args, lambda: _require_redis(settings, embedded_ok=True), settings.keys)
        run = export_command if args.audit_command == "export" else follow_command
        return run(args, _require_redis(settings, embedded_ok=True), settings.keys)
    if args.command == "status":
        return status(settings.state_dir)
    if args.command == "stop":
        return stop(settings.state_dir, args.timeout)
    from bus.policy.loading import load_policy

    if args.command in ("dispatcher", "worker"):
        _import_path()
    policy = load_policy(settings.policy_paths)
    for note in policy.notes:
        logger.info("policy: %s", note)
    warning = _empty_warning(settings, policy)
    if args.command == "up":
        from hookbus.platform.preflight import import_problems
        from hookbus.platform.supervisor import run_platform

        if problems := import_problems(policy):
            raise PolicyError(problems)
        os.environ["HOOKBUS_LOG_FORMAT"] = settings.log_format  # the roles log as `up` was told to
        return run_platform(
            settings, dispatchers=args.dispatchers, policy=policy, restart_limit=args.restart_limit, warning=warning
        )
    if warning:
        print(warning, file=sys.stderr, flush=True)
    if args.command == "gateway":
        from gateway.server import serve

        serve(settings, policy, _require_redis(settings))
        return 0
    if args.command == "dispatcher":
        import uvloop

        from workers.dispatcher.service import serve_dispatcher

        uvloop.run(serve_dispatcher(settings, policy, _require_redis(settings), args.metrics_port))
        return 0
    if args.command == "worker":
        import uvloop

        from workers.jobs.worker import serve_worker

        uvloop.run(serve_worker(settings, policy, _require_redis(settings), args.metrics_port))
        return 0
    raise ConfigError(f"unknown command {args.command}")


def policy_check(files: list[str], *, strict: bool = False) -> int:
    """``hookbus policy check``: exit 0 and a summary, or 1 and every problem with its line.

    Besides validating, it imports every ``function`` handler and plugin (in a child process,
    with this directory and ``PYTHONPATH`` as the search path), and warns about every decision
    an agent the policy names cannot carry out. ``strict`` makes notes and warnings errors.
    """
    from bus.policy.agents import agent_warnings
    from bus.policy.loading import load_policy
    from hookbus.platform.preflight import import_problems

    policy = load_policy(files)
    if problems := import_problems(policy):
        raise PolicyError(problems)
    warnings = [f"warning: {warning}" for warning in agent_warnings(policy)]
    if strict and (policy.notes or warnings):
        for note in [*policy.notes, *warnings]:
            print(f"{note} (an error under --strict)", file=sys.stderr)
        return 1
    for note in policy.notes:
        print(f"note: {note}")
    for warning in warnings:
        print(warning)
    print(f"ok: {policy.handler_count} handlers on {len(policy.events())} events (revision {policy.revision})")
    return 0


def status(state_dir: str) -> int:
    """``hookbus status``: what runs from ``state_dir``; exit 1 when nothing does."""
    from hookbus.platform.state import running

    where = os.path.abspath(state_dir)
    state = running(state_dir)
    if state is None:
        print(f"hookbus: nothing running from {where}")
        return 1
    if "pid" not in state:
        print(f"hookbus up is starting in {where}")
        return 0
    print(f"hookbus up (pid {state['pid']}) {state.get('status', 'running')} from {where}")
    for role in state.get("roles", []):
        pid = f"pid {role['pid']}" if role.get("pid") else "waiting to restart"
        extra = f", restarted {role['restarts']}x" if role.get("restarts") else ""
        url = f" on {state.get('url')}" if role["role"] == "gateway" else ""
        print(f"  {role['role']:<10} {pid}{extra}{url}")
    redis = state.get("redis") or {}
    kind = f"embedded, pid {redis.get('pid')}" if redis.get("embedded") else "external"
    print(f"  {'redis':<10} {redis.get('url')} ({kind})")
    policy = state.get("policy") or {}
    files = ", ".join(policy.get("files") or []) or "no policy file: every event gets no opinion"
    print(f"  {'policy':<10} revision {policy.get('revision')}, {policy.get('handlers', 0)} handlers ({files})")
    return 0


def stop(state_dir: str, timeout_s: float) -> int:
    """``hookbus stop``: SIGTERM to the ``hookbus up`` of ``state_dir``, then wait until it is gone."""
    import signal
    import time

    from hookbus.platform.state import LOCK_NAME, is_held, running

    where = os.path.abspath(state_dir)
    state = running(state_dir)
    if state is None:
        print(f"hookbus: nothing running from {where}")
        return 0
    if not isinstance(state.get("pid"), int):
        raise HookBusError(f"hookbus up in {where} is still starting; try again in a moment")
    pid = state["pid"]
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        pass  # it ended between the two looks
    except PermissionError as exc:
        raise HookBusError(f"not allowed to stop pid {pid} (hookbus up from {where})") from exc
    deadline = time.monotonic() + timeout_s
    while is_held(os.path.join(state_dir, LOCK_NAME)):  # released once every role and Redis have stopped
        if time.monotonic() > deadline:
            raise HookBusError(f"hookbus up (pid {pid}) did not stop within {timeout_s:g}s; 'kill -9 {pid}' ends it")
        time.sleep(0.05)
    print(f"hookbus: stopped hookbus up (pid {pid}) from {where}")
    return 0


def emit(args: argparse.Namespace) -> int:
    """``hookbus emit``: send one event by hand and print the decision."""
    import httpx

    from hookbus.shim import hook_url

    hook_input: dict[str, Any] = {
        "hook_event_name": args.event,
        "session_id": args.session,
        "cwd": os.getcwd(),
        "transcript_path": "",
    }
    extra: Any = {}
    if args.input:
        try:
            extra = json.loads(args.input)
        except ValueError as exc:
            raise ConfigError(f"--input is not valid JSON: {exc}") from exc
    if args.tool:
        hook_input["tool_name"] = args.tool
        hook_input["tool_input"] = extra
    elif isinstance(extra, dict):
        hook_input.update(extra)
    url = hook_url(args.url)
    headers = {}
    if token := os.environ.get("HOOKBUS_TOKEN"):
        headers["Authorization"] = f"Bearer {token}"
    try:
        response = httpx.post(url, json=hook_input, headers=headers, timeout=args.timeout)
    except httpx.HTTPError as exc:
        raise HookBusError(f"cannot reach the gateway at {url}: {exc}") from exc
    outcome = response.headers.get("X-Hookbus-Outcome", "")
    event_id = response.headers.get("X-Hookbus-Event-Id", "-")
    print(f"HTTP {response.status_code}  outcome={outcome or '-'}  event_id={event_id}")
    try:
        print(json.dumps(response.json(), indent=2))
    except ValueError:
        print(response.text)
    return 0 if response.is_success else 1


__all__ = ["run_command_line"]
