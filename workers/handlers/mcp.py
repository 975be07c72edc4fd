"""``mcp_tool`` handlers: call a tool on an MCP server over streamable HTTP.

Claude Code calls the tool on a server it is already connected to, named by ``server``.
hookbus has no such connections: it reaches the server at the handler's ``url`` (an
extension field) with the official ``mcp`` SDK's streamable HTTP client, one short-lived
session per call (initialize, ``tools/call``, terminate). Sessions are not pooled: a stateful
MCP session shared by concurrent events would need its own liveness and re-initialisation
rules, and the HTTP connections are what is worth keeping anyway.

* ``input``: string values (at any depth) support ``${path}`` substitution from the hook
  input, with dotted paths (``${tool_input.file_path}``; list items by index). A value that
  is exactly one placeholder keeps the JSON type of what it names; placeholders embedded in
  a longer string are stringified (strings as they are, everything else as JSON). A path
  that names nothing becomes ``""``.
* The result's text content (its ``text`` items joined by newlines) is parsed like command
  stdout on exit 0 (:func:`bus.hooks.output.result_from_body` with ``plain_text_ok``): a JSON
  object is hook output, other text is plain text.
* ``isError: true``, an unknown tool, a server that cannot be reached or answers non-2xx,
  a missing or non-http ``url``, a URL the SSRF guard refuses: non-blocking ``ERROR`` with
  the reason. Running past the timeout: ``TIMEOUT``.

The URL's host goes through the same SSRF guard as http hooks (loopback and private
networks refused unless ``hookbus.http.allowedNetworks`` allows them) before any connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any, Final
from urllib.parse import urlsplit

import httpx
import orjson
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import McpError
from mcp.types import CallToolResult, TextContent

from bus.errors import HookError
from bus.hooks.output import cap_text, result_from_body
from bus.hooks.results import HandlerResult, Outcome
from bus.policy.schema import McpToolHandler
from bus.runtime import tracing
from bus.runtime.ssrf import parse_networks, resolve_checked
from workers.handlers.context import HookContext
from workers.outbound.client import USER_AGENT, GuardedClient, guard_key, outbound_client

_PLACEHOLDER: Final = re.compile(r"\$\{([A-Za-z_][\w-]*(?:\.[\w-]+)*)\}")
_MISSING: Final = object()
#: How much of an error text goes into a reason.
_REASON_CHARS: Final = 500


def lookup(hook_input: Any, path: str) -> Any:
    """The value at dotted ``path`` in the hook input (list items by index), or ``_MISSING``."""
    value = hook_input
    for part in path.split("."):
        if isinstance(value, Mapping) and part in value:
            value = value[part]
        elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        else:
            return _MISSING
    return value


def _as_text(value: Any) -> str:
    if value is _MISSING or value is None:
        return ""
    if isinstance(value, str):
        return value
    return orjson.dumps(value).decode()


def substitute(template: Any, hook_input: Mapping[str, Any]) -> Any:
    """``template`` (the handler's ``input``) with every ``${path}`` replaced from ``hook_input``."""
    if isinstance(template, str):
        whole = _PLACEHOLDER.fullmatch(template)
        if whole is not None:
            value = lookup(hook_input, whole.group(1))
            return "" if value is _MISSING else value
        return _PLACEHOLDER.sub(lambda m: _as_text(lookup(hook_input, m.group(1))), template)
    if isinstance(template, Mapping):
        return {key: substitute(value, hook_input) for key, value in template.items()}
    if isinstance(template, list):
        return [substitute(value, hook_input) for value in template]
    return template


class _Session(ClientSession):
    """A client session that does not validate structured tool output.

    hookbus reads only the text content, and the SDK's validation costs a ``tools/list``
    round trip per fresh session (and fails calls whose tool declares an output schema it
    does not honour).
    """

    async def _validate_tool_result(self, name: str, result: CallToolResult) -> None:
        return None


def _leaves(exc: BaseException) -> list[BaseException]:
    """The exceptions inside (nested) exception groups, or ``[exc]``."""
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in _leaves(inner)]
    return [exc]


def _where(handler: McpToolHandler, url: str) -> str:
    """``MCP server 'name' (host:port)``: never the URL's path, query or user info (may hold secrets)."""
    parts = urlsplit(url)
    return f"MCP server '{handler.server}' ({parts.hostname}:{_port(parts.scheme, parts.port)})"


def _port(scheme: str, port: int | None) -> int:
    return port or (443 if scheme == "https" else 80)


def _failure(handler: McpToolHandler, url: str, exc: BaseException, statuses: list[int]) -> str:
    """A clear reason for a failed call, from the most telling of the exceptions raised."""
    where = _where(handler, url)
    leaves = _leaves(exc)
    for leaf in leaves:
        if isinstance(leaf, HookError):  # the SSRF guard at connect time, the response size cap
            return f"{where}: {leaf}"
    for leaf in leaves:
        if isinstance(leaf, httpx.TransportError):
            return f"{where} is not connected: {type(leaf).__name__}: {leaf or 'connection failed'}"
    if statuses:
        return f"{where} answered HTTP {statuses[0]}"
    for leaf in leaves:
        if isinstance(leaf, McpError):
            return f"{where}: MCP error: {leaf}"
    first = leaves[0]
    return f"{where}: {type(first).__name__}: {first}"


def _text(result: CallToolResult) -> str:
    return "\n".join(item.text for item in result.content if isinstance(item, TextContent))


async def call_tool(url: str, tool: str, arguments: dict[str, Any], client: httpx.AsyncClient) -> CallToolResult:
    """Call ``tool`` on the MCP server at ``url`` in a session of its own."""
    async with (
        streamable_http_client(url, http_client=client) as (read, write, _),
        _Session(read, write) as session,
    ):
        await session.initialize()
        return await session.call_tool(tool, arguments)


OnResponse = Callable[[httpx.Response], Awaitable[None]]


@contextlib.asynccontextmanager
async def guarded_client(
    ctx: HookContext, timeout_s: float, on_response: OnResponse
) -> AsyncIterator[httpx.AsyncClient]:
    """An httpx client for one MCP session, on the process's SSRF-guarded transport.

    It shares the transport (connection pool, guard, size cap) of
    :func:`workers.outbound.client.outbound_client` and adds this call's timeout and a response
    hook; it is not closed afterwards, since closing it would close the shared transport.
    Without ``Services`` (a bare context) it gets a guarded transport of its own, closed after.
    """
    own = GuardedClient(guard_key(ctx.policy)) if ctx.services is None else None
    shared = own or outbound_client(ctx.services, ctx.policy)
    assert isinstance(shared, GuardedClient)
    client = httpx.AsyncClient(
        transport=shared.guard,
        timeout=httpx.Timeout(timeout_s),
        follow_redirects=False,
        trust_env=False,
        headers={"User-Agent": USER_AGENT, "Accept-Encoding": "identity"},
        event_hooks={"request": [_send_traceparent], "response": [on_response]},
    )
    try:
        yield client
    finally:
        if own is not None:
            await own.aclose()


async def _send_traceparent(request: httpx.Request) -> None:
    if tracing.on:  # the MCP server shows up inside hookbus's trace
        headers: dict[str, str] = {}
        tracing.inject(headers)
        request.headers.update(headers)


async def run(ctx: HookContext) -> HandlerResult:
    """Run one ``mcp_tool`` handler on one event."""
    handler = ctx.entry.handler
    assert isinstance(handler, McpToolHandler)
    url = handler.url
    if not url:
        return HandlerResult(
            Outcome.ERROR,
            reason=(
                f"MCP server '{handler.server}' is not connected: the mcp_tool hook has no 'url' "
                "(hookbus reaches MCP servers over streamable HTTP)"
            ),
        )
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return HandlerResult(
            Outcome.ERROR, reason=f"MCP server '{handler.server}': url must be http(s) (got scheme {parts.scheme!r})"
        )
    arguments = substitute(handler.input, ctx.hook_input)
    statuses: list[int] = []

    async def note_status(response: httpx.Response) -> None:
        if response.status_code >= 400:
            statuses.append(response.status_code)

    try:
        async with asyncio.timeout(ctx.timeout_s):
            # Checked here for a clear reason before any session work; the transport checks
            # again on the address it connects to (no DNS rebinding in between).
            allowed = parse_networks(ctx.policy.settings.http.allowed_networks)
            await resolve_checked(parts.hostname, _port(parts.scheme, parts.port), allowed)
            async with guarded_client(ctx, ctx.timeout_s, note_status) as client:
                result = await call_tool(url, handler.tool, arguments, client)
    except TimeoutError:
        return HandlerResult(
            Outcome.TIMEOUT,
            reason=f"MCP tool '{handler.tool}' on server '{handler.server}' did not answer within {ctx.timeout_s:.3g}s",
        )
    except Exception as exc:
        return HandlerResult(Outcome.ERROR, reason=_failure(handler, url, exc, statuses))
    text = _text(result)
    if result.isError:
        detail = cap_text(text.strip())[:_REASON_CHARS] or "no details"
        return HandlerResult(
            Outcome.ERROR, reason=f"MCP tool '{handler.tool}' on server '{handler.server}' returned an error: {detail}"
        )
    return result_from_body(ctx.event, text, plain_text_ok=True)


__all__ = ["call_tool", "lookup", "run", "substitute"]
