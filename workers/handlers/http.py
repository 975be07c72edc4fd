"""Running Claude Code ``http`` hooks centrally.

**Request.** ``POST`` to the handler's ``url`` with the exact hook input bytes the agent sent
and ``Content-Type: application/json``, through the SSRF-guarded client of
:mod:`workers.outbound.client` (no redirects followed, body capped at ``maxResponseBytes``).

**Answer.** Only a 2xx response counts: an empty body is no opinion, a JSON object is parsed
and checked like command stdout (:func:`bus.hooks.output.result_from_body`), any other body is a
non-blocking error. Non-2xx (redirects included), a connection failure, a refused address
and a body over the cap are :attr:`Outcome.ERROR` with a reason saying which; no answer
within the handler's ``timeout`` (bounded by the event's deadline) is
:attr:`Outcome.TIMEOUT`.

**Headers.** Values may use ``$VAR`` / ``${VAR}``. A variable is read from the dispatcher's
environment only if the handler's ``allowedEnvVars`` names it and, when the policy sets
``httpHookAllowedEnvVars``, that list names it too; every other reference becomes ``""``.
Control characters (CR, LF, NUL...; tab is kept) are removed from the final value, so no
value can add a header. ``Host``, ``Content-Length``, ``Transfer-Encoding``, ``Connection``
and the other framing / hop-by-hop headers cannot be set; ``Content-Type`` is always JSON.
Header values carry secrets: they are never logged and appear in no reason or repr.

**Signed deliveries.** An async delivery (and any hook with ``secret: $VAR``) carries the
Standard Webhooks headers of :mod:`workers.outbound.webhooks`; a policy cannot set them itself.

**allowedHttpHookUrls.** When the policy defines it (``[]`` blocks every http hook), a hook
whose URL matches no pattern is not run. ``*`` is the only wildcard. Scheme and host compare
case-insensitively and one trailing dot of a host is ignored, on both sides. Where Claude Code
is silent, hookbus is strict: a ``*`` inside the host part of a pattern matches within the
authority only (never ``/``, ``?``, ``#`` or ``@``), so ``https://*.example.com/*`` does not
match ``https://evil.test/.example.com/``; a pattern ending in its authority with ``*``
(``http://localhost:*``) also matches any path after it.
"""

from __future__ import annotations

import email.utils
import functools
import logging
import os
import re
import time
from collections.abc import Iterable, Mapping

from bus.errors import HookError, HookTimeout, ResponseTooLarge, SigningError, SSRFBlocked
from bus.hooks.output import result_from_body
from bus.hooks.results import HandlerResult, Outcome
from bus.policy.loading import Policy
from bus.policy.schema import HttpHandler
from workers.handlers.context import HookContext
from workers.outbound.client import guarded_request
from workers.outbound.webhooks import webhook_headers, webhook_id
from workers.services import Services

logger = logging.getLogger("hookbus.http")

_VAR = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))")
_UNSAFE = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")
#: Headers a policy may not set: request framing, hop-by-hop, and the ones hookbus sets itself.
_RESERVED_HEADERS = frozenset(
    {
        "host",
        "content-length",
        "transfer-encoding",
        "connection",
        "keep-alive",
        "te",
        "trailer",
        "upgrade",
        "proxy-connection",
        "content-type",
        "webhook-id",
        "webhook-timestamp",
        "webhook-signature",
    }
)
#: Failures that would fail the same way on every try: an address the guard refuses, a body
#: over the cap, a delivery that cannot be signed.
_FINAL_ERRORS = (SSRFBlocked, ResponseTooLarge, SigningError)
#: Statuses worth another try besides 5xx: Request Timeout, Too Many Requests (RFC 9110, 6585).
_RETRYABLE_STATUSES = frozenset({408, 429})
_AUTHORITY_END = re.compile(r"[/?#]")


def allowed_env_vars(handler: HttpHandler, top_level: Iterable[str] | None) -> frozenset[str]:
    """The variables ``handler``'s headers may read: its ``allowedEnvVars`` ∩ ``httpHookAllowedEnvVars``."""
    own = frozenset(handler.allowed_env_vars or ())
    return own if top_level is None else own & frozenset(top_level)


def interpolate(value: str, allowed: frozenset[str], environ: Mapping[str, str]) -> str:
    """``value`` with ``$VAR``/``${VAR}`` filled (allowed names only, others ``""``), control chars removed."""

    def sub(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2)
        return environ.get(name, "") if name in allowed else ""

    return _UNSAFE.sub("", _VAR.sub(sub, value))


def render_headers(
    handler: HttpHandler, top_level: Iterable[str] | None, environ: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The request headers of ``handler`` (see the module docstring); the result holds secrets."""
    allowed = allowed_env_vars(handler, top_level)
    env = os.environ if environ is None else environ
    headers = {
        name: interpolate(value, allowed, env)
        for name, value in handler.headers.items()
        if name.strip().lower() not in _RESERVED_HEADERS
    }
    headers["Content-Type"] = "application/json"
    return headers


def _split_url(url: str) -> tuple[str, str, str] | None:
    """``(scheme, authority, rest)`` of ``url`` with scheme and host normalised, or None without ``://``."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return None
    found = _AUTHORITY_END.search(rest)
    end = found.start() if found else len(rest)
    userinfo, at, hostport = rest[:end].rpartition("@")
    if hostport.startswith("["):
        close = hostport.find("]") + 1 or len(hostport)
        host, port = hostport[:close], hostport[close:]
    else:
        colon = hostport.rfind(":")
        host, port = (hostport[:colon], hostport[colon:]) if colon >= 0 else (hostport, "")
    host = host.lower()
    if host.endswith("."):
        host = host[:-1]
    return scheme.lower(), f"{userinfo}{at}{host}{port}", rest[end:]


def _glob(text: str, star: str) -> str:
    return "".join(star if ch == "*" else re.escape(ch) for ch in text)


@functools.lru_cache(maxsize=512)
def _pattern(pattern: str) -> re.Pattern[str]:
    parts = _split_url(pattern)
    if parts is None:
        return re.compile(_glob(pattern, ".*"), re.DOTALL)
    scheme, authority, rest = parts
    regex = f"{_glob(scheme, '[^/]*')}://{_glob(authority, '[^/?#@]*')}"
    if not rest and authority.endswith("*"):
        regex += "(?:[/?#].*)?"
    return re.compile(regex + _glob(rest, ".*"), re.DOTALL)


def url_allowed(url: str, patterns: Iterable[str] | None) -> bool:
    """Whether ``allowedHttpHookUrls`` (None: no restriction) lets an http hook call ``url``."""
    if patterns is None:
        return True
    parts = _split_url(url)
    normal = url if parts is None else f"{parts[0]}://{parts[1]}{parts[2]}"
    return any(_pattern(p).fullmatch(normal) for p in patterns)


def retry_after_s(value: str | None, now_s: float | None = None) -> float | None:
    """Seconds a ``Retry-After`` header asks to wait (delay-seconds or an HTTP date), or None."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    return max(0.0, when.timestamp() - (time.time() if now_s is None else now_s))


async def run_http(
    handler: HttpHandler,
    event: str,
    payload: bytes,
    *,
    policy: Policy,
    services: Services | None,
    timeout_s: float,
    environ: Mapping[str, str] | None = None,
    message_id: str | None = None,
    delivery: bool = False,
) -> HandlerResult:
    """POST ``payload`` to ``handler.url`` and read the answer as Claude Code does. Never raises for hook failures.

    ``message_id`` adds the Standard Webhooks headers (:mod:`workers.outbound.webhooks`), signed when the
    handler has a ``secret``. ``delivery`` (async hooks) counts any 2xx as delivered: a body that
    is not a hook answer (a webhook's ``ok``) is then no opinion rather than an error. A failure's
    ``retryable`` says whether another try may help (connection errors, timeouts, 5xx, 408, 429
    with its ``Retry-After``) or would be refused the same way (other statuses, a blocked URL).
    """
    started = time.perf_counter()

    def done(outcome: Outcome, reason: str | None = None, *, retryable: bool = True) -> HandlerResult:
        return finish(HandlerResult(outcome, reason=reason, retryable=retryable))

    def finish(result: HandlerResult) -> HandlerResult:
        result.handler_type = "http"
        result.duration_s = time.perf_counter() - started
        return result

    if not url_allowed(handler.url, policy.allowed_http_hook_urls):
        return done(
            Outcome.ERROR, "blocked by allowedHttpHookUrls: the hook URL matches no allowed pattern", retryable=False
        )
    env = os.environ if environ is None else environ
    headers = render_headers(handler, policy.http_hook_allowed_env_vars, env)
    try:
        if message_id is not None:
            headers.update(webhook_headers(message_id, payload, handler.secret, env))
        response = await guarded_request(
            services, policy, "POST", handler.url, content=payload, headers=headers, timeout_s=timeout_s
        )
    except HookTimeout as exc:
        return done(Outcome.TIMEOUT, str(exc))
    except HookError as exc:
        return done(Outcome.ERROR, str(exc), retryable=not isinstance(exc, _FINAL_ERRORS))
    if not response.ok:
        logger.debug("http hook answered %s", response.status_code)
        status = response.status_code
        result = done(
            Outcome.ERROR,
            f"http hook answered HTTP {status} {response.reason_phrase}".rstrip(),
            retryable=status >= 500 or status in _RETRYABLE_STATUSES,
        )
        if result.retryable:
            result.retry_after_s = retry_after_s(response.headers.get("retry-after"))
        return result
    result = result_from_body(event, response.text)
    if delivery and result.outcome is Outcome.ERROR:
        result = HandlerResult(Outcome.OK)  # delivered; the answer is not a hook output, so no opinion
    return finish(result)


async def run(ctx: HookContext) -> HandlerResult:
    """The dispatcher's entry point for an ``http`` handler."""
    handler = ctx.entry.handler
    assert isinstance(handler, HttpHandler)
    message_id = ctx.delivery_id or (webhook_id(ctx.request.event_id, ctx.entry.handler_id) if handler.secret else None)
    return await run_http(
        handler,
        ctx.event,
        ctx.payload,
        policy=ctx.policy,
        services=ctx.services,
        timeout_s=min(ctx.timeout_s, ctx.request.remaining_s()),
        message_id=message_id,
        delivery=bool(ctx.delivery_id),
    )


__all__ = ["allowed_env_vars", "interpolate", "render_headers", "retry_after_s", "run", "run_http", "url_allowed"]
