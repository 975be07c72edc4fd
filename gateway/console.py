"""The console: ``GET /ui`` (one page from package data) and ``POST /v1/policy/replay`` (docs/api.md).

The page is static files shipped in the package (``gateway/ui/``), with no build step
and nothing loaded from elsewhere; a Content-Security-Policy holds it to its own origin.

``POST /v1/policy/replay`` runs ``hookbus policy replay --json`` on a candidate policy in a
child process: the same code as the command line, and the candidate's Python (``function``
handlers, plugins) is imported there, never in the gateway. Only modules the running policy
already imports may run; side-effect handlers are never run from here. Org admins only (or
anyone, on a gateway with no tokens); one replay at a time per gateway process.

``GET /v1/policy/coverage`` runs ``hookbus policy coverage --json`` the same way, on the policy
this gateway runs: which of its handlers and rules decided the logged traffic of a window.

The gateway's event loop only waits for the child, so it goes on answering hooks; the child has
one core at a lower priority, at most :data:`REPLAY_MEMORY_BYTES`, and
``HOOKBUS_CONSOLE_BUDGET_S`` to read the window (``--budget``): past it the report says it is
partial. Each logged input is judged there as a live decision judges it (``hookbus.limits``,
the split budget), so one huge input costs no more than it did live. A child still running
:data:`CHILD_GRACE_S` after its budget is killed.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import resource
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.datastructures import MutableHeaders
from starlette.requests import Request as HTTPRequest
from starlette.responses import Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from bus.decisionlog.audit import Window
from bus.errors import RequestRejected, TimeError
from bus.policy.loading import Policy
from bus.policy.schema import FunctionHandler
from bus.runtime.children import die_with_parent
from bus.runtime.settings import Settings
from gateway.access import check_single_authorization, error_response, rejection, request_caller

#: How long past its budget a child may take (to start, and to finish the record it was on)
#: before it is killed (504).
CHILD_GRACE_S = 20.0
#: The address space a replay's child may take (``RLIMIT_AS``): a candidate that would take more
#: (a YAML alias bomb, a window too wide) stops with a ``MemoryError``, not the gateway's machine.
REPLAY_MEMORY_BYTES = 1 << 30
_OUT_OF_MEMORY = (
    "failed to map segment",
    "Cannot allocate memory",
    # A C function whose allocation failed without raising, or a traceback that could not be printed.
    "error return without exception set",
    "without setting an exception",
    "lost sys.stderr",
)
DEFAULT_REPLAY_LIMIT = 20_000
MAX_REPLAY_LIMIT = 100_000
_CHILD_ENV_DROP = frozenset(
    {
        "PROMETHEUS_MULTIPROC_DIR",
        "HOOKBUS_TOKENS",
        "HOOKBUS_TOKENS_FILE",
        "HOOKBUS_ADMIN_TOKENS",
        "HOOKBUS_METRICS_TOKEN",
        "HOOKBUS_CONFIG",
    }
)
_PAGE_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
    "img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}


class _PageHeaders:
    """Adds the page's security headers to every response of the static files."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                MutableHeaders(scope=message).update(_PAGE_HEADERS)
            await send(message)

        await self.app(scope, receive, send_with_headers)


def console_page() -> list[BaseRoute]:
    """``/ui`` (redirects to ``/ui/``) and its assets, from ``gateway/ui`` in the package."""

    async def to_page(request: HTTPRequest) -> Response:
        # Relative: an absolute one would name whatever the client sent as its Host header.
        return Response(status_code=307, headers={"Location": "/ui/"})

    return [
        Route("/ui", to_page, methods=["GET", "HEAD"]),
        Mount("/ui", app=_PageHeaders(StaticFiles(packages=[("gateway", "ui")], html=True)), name="ui"),
    ]


class ReplayBody(BaseModel):
    """The body of ``POST /v1/policy/replay``."""

    model_config = ConfigDict(extra="forbid")

    policy: str = Field(min_length=1, description="the candidate policy file's text (YAML or JSON)")
    since: str | None = Field(default=None, max_length=64)
    until: str | None = Field(default=None, max_length=64)
    tenant: list[str] = Field(default_factory=list, max_length=64)
    limit: int = Field(default=DEFAULT_REPLAY_LIMIT, gt=0, le=MAX_REPLAY_LIMIT)


def policy_modules(policy: Policy) -> frozenset[str]:
    """The Python modules a policy imports (its ``function`` handlers and plugins)."""
    names = [
        *policy.settings.plugins,
        *(
            entry.handler.function
            for event in policy.events()
            for entry in policy.entries(event)
            if isinstance(entry.handler, FunctionHandler)
        ),
    ]
    return frozenset(name.partition(":")[0] for name in names)


async def _read_body(request: HTTPRequest, limit: int) -> bytes:
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise RequestRejected(413, "payload_too_large", f"body is over the limit of {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def replay_route(settings: Settings, redis_url: str, current_policy: Callable[[], Policy]) -> Route:
    """``POST /v1/policy/replay`` (see the module docstring)."""
    busy = asyncio.Lock()

    async def replay(request: HTTPRequest) -> Response:
        try:
            check_single_authorization(request.scope["headers"])
            caller = await request_caller(settings, request)
            if not caller.admin:
                raise RequestRejected(403, "forbidden", "policy replay needs an org-admin token (HOOKBUS_ADMIN_TOKENS)")
            body = ReplayBody.model_validate_json(await _read_body(request, settings.max_body_bytes))
            Window.parse(body.since, body.until)  # a bad time is the caller's, found before any child runs
        except TimeError as exc:
            return error_response(400, "invalid_time", str(exc))
        except RequestRejected as exc:
            return rejection(exc)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(part) for part in first["loc"]) or "body"
            return error_response(400, "invalid_body", f"{where}: {first['msg']}")
        if busy.locked():
            return error_response(
                429, "replay_busy", "a replay is running on this gateway; try again when it ends", {"Retry-After": "5"}
            )
        async with busy:
            return await _run_replay(settings, redis_url, body, policy_modules(current_policy()))

    return Route("/v1/policy/replay", replay, methods=["POST"])


def _replay_child(memory_bytes: int) -> None:
    """``preexec_fn`` of a replay's child: dies with the gateway, at most ``memory_bytes`` of address
    space, and a lower CPU priority (``nice`` 10): on a shared host the gateway, the dispatchers and
    Redis come first."""
    die_with_parent()
    os.setpriority(os.PRIO_PROCESS, 0, min(os.getpriority(os.PRIO_PROCESS, 0) + 10, 19))
    resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))  # last: Python allocates no more here


def _child_failure(problems: str) -> str | None:
    """The one line to answer for a child that crashed (a traceback on stderr), else None."""
    if "Traceback (most recent call last)" not in problems:
        return None
    return problems.splitlines()[-1].strip()[:500]


async def _run_child(argv: list[str], settings: Settings, redis_url: str) -> tuple[int | None, bytes, bytes]:
    """Run ``python -m hookbus ARGV --budget=HOOKBUS_CONSOLE_BUDGET_S`` on this gateway's Redis,
    with no token in its environment.

    Raises TimeoutError :data:`CHILD_GRACE_S` past its budget (the child is killed); the child
    never outlives the wait, even when it is cancelled (the client left)."""
    env = {k: v for k, v in os.environ.items() if k not in _CHILD_ENV_DROP}
    env.update(HOOKBUS_REDIS_URL=redis_url, HOOKBUS_KEY_PREFIX=settings.key_prefix)
    child = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "hookbus",
        *argv,
        f"--budget={settings.console_budget_s!r}",
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
        preexec_fn=functools.partial(_replay_child, REPLAY_MEMORY_BYTES),
    )
    try:
        async with asyncio.timeout(settings.console_budget_s + CHILD_GRACE_S):
            out, err = await child.communicate()
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            child.kill()
        await child.wait()
        raise
    finally:
        if child.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                child.kill()
    return child.returncode, out, err


async def _run_replay(settings: Settings, redis_url: str, body: ReplayBody, trusted: frozenset[str]) -> Response:
    with tempfile.TemporaryDirectory(prefix="hookbus-candidate-") as folder:
        name = "candidate.json" if body.policy.lstrip().startswith("{") else "candidate.yaml"
        path = Path(folder) / name
        path.write_text(body.policy, encoding="utf-8")
        argv = [
            "policy",
            "replay",
            str(path),
            "--json",
            f"--limit={body.limit}",
            f"--trusted-module={','.join(sorted(trusted))}",
        ]
        argv += [f"--since={body.since}"] if body.since else []
        argv += [f"--until={body.until}"] if body.until else []
        argv += [f"--tenant={tenant}" for tenant in body.tenant]
        try:
            returncode, out, err = await _run_child(argv, settings, redis_url)
        except TimeoutError:
            return error_response(
                504,
                "replay_timeout",
                f"the replay did not stop within its budget of {settings.console_budget_s:g} s "
                f"and {CHILD_GRACE_S:g} s more: narrow the window (since/until) or lower the limit",
            )
        problems = err.decode("utf-8", "replace").replace(str(path), name).strip()
    if returncode == 0:
        try:
            report = orjson.loads(out)
            report["candidate"]["sources"] = [name]  # not the gateway's temporary path
        except (orjson.JSONDecodeError, KeyError, TypeError):
            return error_response(500, "replay_failed", "the replay's answer is not a report (see the gateway's log)")
        return Response(orjson.dumps(report), media_type="application/json")
    if (crash := _child_failure(problems)) is not None:
        # Past RLIMIT_AS an allocation fails (MemoryError), and so does mapping a module's code
        # (an ImportError: "failed to map segment", "Cannot allocate memory"); while Python starts,
        # a failed allocation can also surface as a SystemError or a lost stderr.
        if crash.startswith("MemoryError") or any(word in crash for word in _OUT_OF_MEMORY):
            return error_response(
                400,
                "replay_too_large",
                f"the replay ran out of its memory ({REPLAY_MEMORY_BYTES >> 20} MiB): the candidate policy "
                "expands too far (YAML aliases?) or the window is too wide: narrow since/until or lower the limit",
            )
        return error_response(500, "replay_failed", f"the replay failed: {crash}")
    if returncode == 1 and problems:
        code = "invalid_request" if problems.startswith("hookbus: ") else "invalid_policy"
        return error_response(400, code, problems.removeprefix("hookbus: ")[:4000])
    last = problems.splitlines()[-1] if problems else f"exit code {returncode}"
    return error_response(500, "replay_failed", f"the replay failed: {last[:500]}")


def coverage_route(settings: Settings, redis_url: str, current_policy: Callable[[], Policy]) -> Route:
    """``GET /v1/policy/coverage?since=7d&until=&tenant=`` (see the module docstring)."""
    busy = asyncio.Lock()

    async def coverage(request: HTTPRequest) -> Response:
        params = request.query_params
        since, until, tenants = params.get("since") or "7d", params.get("until") or None, params.getlist("tenant")
        try:
            check_single_authorization(request.scope["headers"])
            caller = await request_caller(settings, request)
            if not caller.admin:
                why = "policy coverage needs an org-admin token (HOOKBUS_ADMIN_TOKENS)"
                raise RequestRejected(403, "forbidden", why)
            if max(len(since), len(until or ""), *(len(t) for t in tenants), 0) > 64 or len(tenants) > 64:
                raise RequestRejected(400, "invalid_request", "since, until and tenant take at most 64 characters")
            Window.parse(since, until)
        except TimeError as exc:
            return error_response(400, "invalid_time", str(exc))
        except RequestRejected as exc:
            return rejection(exc)
        if busy.locked():
            return error_response(
                429, "coverage_busy", "a coverage report is running on this gateway; try again when it ends"
            )
        async with busy:
            return await _run_coverage(settings, redis_url, current_policy(), since, until, tenants)

    return Route("/v1/policy/coverage", coverage, methods=["GET"])


async def _run_coverage(
    settings: Settings, redis_url: str, policy: Policy, since: str, until: str | None, tenants: list[str]
) -> Response:
    with tempfile.TemporaryDirectory(prefix="hookbus-coverage-") as folder:
        argv = ["policy", "coverage", "--json", f"--since={since}"]
        argv += [f"--until={until}"] if until else []
        argv += [f"--tenant={tenant}" for tenant in tenants]
        named: dict[str, str] = {}
        for i, file in enumerate(policy.files or ()):
            path = Path(folder) / f"{i}-{Path(file.source).name or 'policy.yaml'}"
            path.write_text(file.text, encoding="utf-8")
            named[str(path)] = file.source
            argv.append(f"--policy={path}")
        if not named:  # no policy at all: every handler count is empty, the tools are all uncovered
            (Path(folder) / "empty.yaml").write_text("hooks: {}\n", encoding="utf-8")
            argv.append(f"--policy={Path(folder) / 'empty.yaml'}")
        try:
            returncode, out, err = await _run_child(argv, settings, redis_url)
        except TimeoutError:
            message = (
                f"the coverage report did not stop within its budget of {settings.console_budget_s:g} s "
                f"and {CHILD_GRACE_S:g} s more: narrow the window"
            )
            return error_response(504, "coverage_timeout", message)
    if returncode != 0:
        problems = err.decode("utf-8", "replace").strip()
        last = problems.splitlines()[-1] if problems else f"exit code {returncode}"
        return error_response(500, "coverage_failed", f"the coverage report failed: {last[:500]}")
    text = out.decode("utf-8", "replace")
    for copied, source in named.items():  # the policy's own file names, not the gateway's temporary ones
        text = text.replace(orjson.dumps(copied).decode()[1:-1], orjson.dumps(source).decode()[1:-1])
    return Response(text.encode(), media_type="application/json")


__all__ = ["CHILD_GRACE_S", "ReplayBody", "console_page", "coverage_route", "policy_modules", "replay_route"]
