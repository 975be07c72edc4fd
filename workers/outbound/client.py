"""The one outbound HTTP client of a dispatcher or worker process, behind the SSRF guard.

Every request hookbus makes on a policy's behalf (http hooks, the LLM endpoint of prompt and
agent hooks, MCP servers) goes through :func:`outbound_client`; :func:`guarded_request` adds
the per-request deadline, reads the body under the size cap and maps httpx's exceptions to
hookbus's (:class:`~bus.errors.OutboundError`, :class:`~bus.errors.OutboundTimeout`, and from
:mod:`bus.runtime.ssrf` :class:`~bus.runtime.ssrf.SSRFBlocked` /
:class:`~bus.runtime.ssrf.ResolveError` / :class:`~bus.runtime.ssrf.ResponseTooLarge`), all
:class:`~bus.errors.HookError`.

The client lives in ``Services.http_client``, created on first use and keyed by the policy's
``allowedNetworks`` and ``maxResponseBytes``: a policy that changes them gets a new client and
the old one is closed once its last request has finished. The slot belongs to this module; a
value that is not a :class:`GuardedClient` is replaced, never used, so nothing can put an
unguarded client in front of the guard. Callers should ask for the client per request rather
than keep it, since a replaced client is closed.

Client settings: no redirects followed, no proxy or ``SSL_CERT_*`` environment
(``trust_env=False``), HTTP/1.1 on :class:`~workers.outbound.transport.GuardedTransport`
(pooled HTTP/1.1 connections, up to 32 per host and 100 in all, kept alive 30 s),
``Accept-Encoding: identity`` (a compressed body could otherwise expand far past the cap that
is counted on the wire; :func:`guarded_request` counts the decoded bytes too).

:func:`guarded_request` hands its ``httpx.Request`` to the client's transport itself rather
than through ``AsyncClient.send``: a request that follows no redirect, has no auth and keeps
no cookies does not need that machinery, which cost more CPU than the transport (the parsed
URL of each hook is kept too, for the same reason).
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools

import httpx

from bus.errors import HookError, OutboundError, OutboundTimeout, ResponseTooLarge
from bus.policy.loading import Policy
from bus.runtime import tracing
from bus.runtime.ssrf import parse_networks
from workers.outbound.transport import Buffered, GuardedTransport
from workers.services import Services

USER_AGENT = "hookbus/0.1"
#: Used when a caller sends through the client without a timeout of its own.
DEFAULT_TIMEOUT = httpx.Timeout(30.0, connect=10.0)

GuardKey = tuple[tuple[str, ...], int]


class GuardedClient(httpx.AsyncClient):
    """An ``httpx.AsyncClient`` on a :class:`~workers.outbound.transport.GuardedTransport`, with its guard key."""

    def __init__(self, key: GuardKey) -> None:
        networks, max_bytes = key
        self.guard = GuardedTransport(parse_networks(networks), max_response_bytes=max_bytes)
        self.guard_key = key
        super().__init__(
            transport=self.guard,
            follow_redirects=False,
            trust_env=False,
            timeout=DEFAULT_TIMEOUT,
            headers={"User-Agent": USER_AGENT, "Accept-Encoding": "identity"},
        )


def guard_key(policy: Policy) -> GuardKey:
    """What the shared client depends on: the allowed networks and the response size cap."""
    http = policy.settings.http
    return _guard_key(tuple(http.allowed_networks), http.max_response_bytes)


@functools.lru_cache(maxsize=64)
def _guard_key(allowed_networks: tuple[str, ...], max_response_bytes: int) -> GuardKey:
    # Asked on every outbound request: the networks are parsed once per policy, not each time.
    return tuple(sorted({str(net) for net in parse_networks(allowed_networks)})), max_response_bytes


def outbound_client(services: Services | None, policy: Policy) -> httpx.AsyncClient:
    """The process's guarded client for ``policy``, created or rebuilt as needed (see the module docstring)."""
    if services is None:
        raise OutboundError("outbound HTTP needs the process's Services, and this handler context has none")
    key = guard_key(policy)
    current = services.http_client
    if isinstance(current, GuardedClient) and current.guard_key == key and not current.is_closed:
        return current
    if isinstance(current, GuardedClient):
        current.guard.close_when_idle()
    client = GuardedClient(key)
    services.http_client = client
    return client


@dataclasses.dataclass(frozen=True, slots=True)
class OutboundResponse:
    """A fully read response; ``headers`` and ``body`` are left out of the repr."""

    status_code: int
    reason_phrase: str
    headers: httpx.Headers = dataclasses.field(repr=False)
    body: bytes = dataclasses.field(repr=False)

    @property
    def ok(self) -> bool:
        """A 2xx status."""
        return 200 <= self.status_code < 300

    @property
    def text(self) -> str:
        """The body as UTF-8 text (invalid bytes replaced)."""
        return self.body.decode("utf-8", errors="replace")


@functools.lru_cache(maxsize=1024)
def _parsed(url: str) -> httpx.URL:
    """``url`` parsed (a policy's few hook URLs, parsed once; invalid ones raise each time)."""
    return httpx.URL(url)


def _where(url: str) -> str:
    """``host[:port]`` of ``url`` for messages (never its path, query or user info, which may hold secrets)."""
    try:
        parsed = _parsed(url)
    except httpx.InvalidURL:
        return "the URL"
    return f"{parsed.host}:{parsed.port}" if parsed.port else parsed.host or "the URL"


def _build(
    client: GuardedClient, method: str, url: str, content: bytes | None, headers: dict[str, str] | None
) -> httpx.Request:
    """The request ``client.build_request`` would build, from raw header pairs (a fifth of the CPU).

    ``headers`` replace the client's defaults of the same name; values must be ASCII.
    """
    parsed = _parsed(url)
    if tracing.on:  # the handler's span: the service answering shows up inside hookbus's trace
        headers = dict(headers or {})
        tracing.inject(headers)
    extra = [(name.encode("ascii"), value.encode("ascii")) for name, value in headers.items()] if headers else []
    names = {name.lower() for name, _ in extra}
    raw = [] if b"host" in names else [(b"Host", parsed.netloc)]
    raw += [pair for pair in client.headers.raw if pair[0].lower() not in names]
    request = httpx.Request(method, parsed, headers=raw + extra, stream=httpx.ByteStream(content or b""))
    request.read()  # the transport takes the body as bytes; Content-Length is its to set
    return request


async def _read_capped(response: httpx.Response, cap: int) -> bytes:
    """The decoded body of ``response``; ResponseTooLarge once it passes ``cap`` bytes."""
    body = bytearray()
    async for chunk in response.aiter_bytes():
        body += chunk
        if len(body) > cap:
            raise ResponseTooLarge(f"response body over {cap} bytes; stopped reading")
    return bytes(body)


async def guarded_request(
    services: Services | None,
    policy: Policy,
    method: str,
    url: str,
    *,
    timeout_s: float,
    content: bytes | None = None,
    headers: dict[str, str] | None = None,
) -> OutboundResponse:
    """Send one request through :func:`outbound_client` and read the whole (capped) body.

    ``timeout_s`` bounds everything: resolution, connect, sending and reading. Raises only
    HookError subclasses: OutboundTimeout, SSRFBlocked, ResolveError, ResponseTooLarge,
    OutboundError. A non-2xx status is a normal return; redirects are returned, not followed.
    """
    client = outbound_client(services, policy)
    assert isinstance(client, GuardedClient)
    cap = policy.settings.http.max_response_bytes
    if timeout_s <= 0:
        raise OutboundTimeout(f"no time left to call {_where(url)}")
    try:
        async with asyncio.timeout(timeout_s):
            # The deadline above bounds resolution, connect, send and read: no per-read timers.
            response = await client.guard.handle_async_request(_build(client, method, url, content, headers))
            try:
                if isinstance(response.stream, Buffered) and "content-encoding" not in response.headers:
                    body = response.stream.body  # already read whole, under the cap: no decoder to run
                else:
                    body = await _read_capped(response, cap)
            finally:
                await response.aclose()
    except (TimeoutError, httpx.TimeoutException) as exc:
        raise OutboundTimeout(f"no answer from {_where(url)} within {timeout_s:.3g}s") from exc
    except HookError:
        raise
    except UnicodeEncodeError as exc:  # its text quotes the offending characters: leave it out
        raise OutboundError(f"request to {_where(url)} not sent: a header is not ASCII") from exc
    except httpx.InvalidURL as exc:
        raise OutboundError(f"invalid URL: {exc}") from exc
    except httpx.UnsupportedProtocol as exc:
        raise OutboundError(f"unsupported URL: {exc}") from exc
    except httpx.ConnectError as exc:
        raise OutboundError(f"connection to {_where(url)} failed: {str(exc) or type(exc).__name__}") from exc
    except httpx.LocalProtocolError as exc:  # its text may quote a header value: leave it out
        raise OutboundError(f"request to {_where(url)} not sent: invalid header name or value") from exc
    except httpx.RemoteProtocolError as exc:
        raise OutboundError(f"{_where(url)} sent an invalid HTTP response: {exc}") from exc
    except httpx.HTTPError as exc:
        raise OutboundError(f"request to {_where(url)} failed: {type(exc).__name__}: {exc}") from exc
    tracing.annotate("http.response.status_code", response.status_code)
    return OutboundResponse(response.status_code, response.reason_phrase, response.headers, body)


__all__ = [
    "DEFAULT_TIMEOUT",
    "USER_AGENT",
    "GuardKey",
    "GuardedClient",
    "OutboundResponse",
    "OutboundTimeout",
    "guard_key",
    "guarded_request",
    "outbound_client",
]
