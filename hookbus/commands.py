"""What each ``hookbus`` sub-command does; errors become a message and an exit code here."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
from typing import Any

from bus.errors import ConfigError, HookBusError, PolicyError
from bus.settings import Settings

logger = logging.getLogger("hookbus")


def _settings(args: argparse.Namespace) -> Settings:
    return Settings.from_env(
        redis_url=getattr(args, "redis_url", None),
        policy_paths=tuple(args.config) if getattr(args, "config", None) else None,
        host=getattr(args, "host", None),
        port=getattr(args, "port", None),
        insecure=getattr(args, "insecure", None),
        state_dir=getattr(args, "state_dir", None),
    )


def _setup_logging(settings: Settings) -> None:
    logging.basicConfig(
        level=settings.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s[%(process)d]: %(message)s",
        stream=sys.stderr,
    )


def _require_redis(settings: Settings, *, embedded_ok: bool = False) -> str:
    if settings.redis_url:
        return settings.redis_url
    socket = os.path.join(settings.state_dir, "redis", "redis.sock")
    if embedded_ok and os.path.exists(socket):  # the embedded Redis of a `hookbus up` run from here
        return f"unix://{os.path.abspath(socket)}"
    raise ConfigError("no Redis: pass --redis-url or set HOOKBUS_REDIS_URL (or use 'hookbus up')")


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
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `hookbus tail | head`: the reader left, which is not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


def _dispatch(args: argparse.Namespace) -> int:
    if args.command == "policy":
        return policy_check(args.files)
    if args.command == "emit":
        return emit(args)
    if args.command == "install":
        from hookbus.install import run_install

        return run_install(args)
    settings = _settings(args)
    _setup_logging(settings)
    if args.command == "tail":
        from hookbus.tail import tail

        asyncio.run(tail(_require_redis(settings, embedded_ok=True), settings.keys, as_json=args.json,
                         from_start=args.from_start, count=args.count))
        return 0
    from bus.policy import load_policy

    policy = load_policy(settings.policy_paths)
    for note in policy.notes:
        logger.info("policy: %s", note)
    if args.command == "up":
        from hookbus.supervisor import run_platform

        return run_platform(settings, dispatchers=args.dispatchers)
    if args.command == "gateway":
        from gateway.server import serve

        serve(settings, policy, _require_redis(settings))
        return 0
    if args.command == "dispatcher":
        import uvloop

        from workers.service import serve_dispatcher

        uvloop.run(serve_dispatcher(settings, policy, _require_redis(settings), args.metrics_port))
        return 0
    if args.command == "worker":
        import uvloop

        from workers.tasks import serve_worker

        uvloop.run(serve_worker(settings, policy, _require_redis(settings), args.metrics_port))
        return 0
    raise ConfigError(f"unknown command {args.command}")


def policy_check(files: list[str]) -> int:
    """``hookbus policy check``: exit 0 and a summary, or 1 and every problem with its line."""
    from bus.policy import load_policy

    policy = load_policy(files)
    handlers = sum(len(policy.entries(event)) for event in policy.events())
    for note in policy.notes:
        print(f"note: {note}")
    print(f"ok: {handlers} handlers on {len(policy.events())} events (revision {policy.revision})")
    return 0


def emit(args: argparse.Namespace) -> int:
    """``hookbus emit``: send one event by hand and print the decision."""
    import httpx

    from hookbus.shim import DEFAULT_URL

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
    url = args.url or os.environ.get("HOOKBUS_URL") or DEFAULT_URL
    if not url.rstrip("/").endswith("/v1/hooks"):
        url = url.rstrip("/") + "/v1/hooks"
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
