"""The SSRF guard for every outbound request hookbus makes (http hooks, the LLM, MCP servers).

A policy author decides where hookbus sends requests, but an event does not: a hook URL, an
LLM base URL or an MCP server is checked on the address the connection actually goes to.

**What is refused** (:func:`blocked_reason`): loopback, RFC 1918 and unique-local (``fc00::/7``)
private networks, link-local (``169.254.0.0/16`` with the cloud metadata address,
``fe80::/10``), carrier-grade NAT ``100.64.0.0/10``, multicast, unspecified (``0.0.0.0/8``,
``::``), broadcast and the reserved / documentation / benchmarking ranges, and every IPv6
address outside global unicast ``2000::/3``. IPv6 forms that carry an IPv4 address are judged
by that address: IPv4-mapped ``::ffff:a.b.c.d``, NAT64 ``64:ff9b::/96`` and 6to4
``2002::/16``; Teredo and the other IETF protocol assignments (``2001::/23``) are refused.
The tables are explicit rather than Python's ``is_private``/``is_global``, whose answers
change between Python releases. An address inside one of the policy's
``hookbus.http.allowedNetworks`` (or whose embedded IPv4 address is) is always allowed.

**Resolution** (:func:`resolve_checked`). Literal IPs are checked as they are; names go
through ``loop.getaddrinfo`` (so numeric forms such as ``2130706433`` or ``127.1`` are caught
too) and the name is refused if *any* of its addresses is blocked. Refusing only the bad
addresses and connecting to the rest would let one DNS answer mix a public decoy with an
internal target and leave the choice to connection order; a legitimate service never needs
to publish an internal address, so a mixed answer is treated as hostile.

**Connection** (:class:`workers.outbound.transport.GuardedTransport`, which the outbound client
uses). The check happens where the socket is opened: the connection pool resolves through
:func:`resolve_checked` and connects to one of the *checked* addresses, never resolving again
(no DNS rebinding between check and connect); URL, ``Host`` header and TLS keep the host name.
Only ``http`` and ``https``, no proxies, no redirects, response bodies capped
(:class:`ResponseTooLarge`).
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Iterable, Sequence

from bus.errors import ConfigError, ResolveError, SSRFBlocked

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

_ALLOW_HINT = "(allow it with hookbus.http.allowedNetworks)"


def _table(*rows: tuple[str, str]) -> tuple[tuple[IPNetwork, str], ...]:
    return tuple((ipaddress.ip_network(net), why) for net, why in rows)


_V4_BLOCKED = _table(
    ("0.0.0.0/8", "unspecified ('this network', reaches the local host)"),
    ("10.0.0.0/8", "a private network (RFC 1918)"),
    ("100.64.0.0/10", "carrier-grade NAT space (RFC 6598)"),
    ("127.0.0.0/8", "loopback"),
    ("169.254.0.0/16", "link-local (incl. cloud metadata 169.254.169.254)"),
    ("172.16.0.0/12", "a private network (RFC 1918)"),
    ("192.0.0.0/24", "reserved (IETF protocol assignments)"),
    ("192.0.2.0/24", "reserved (documentation)"),
    ("192.88.99.0/24", "reserved (6to4 relay anycast)"),
    ("192.168.0.0/16", "a private network (RFC 1918)"),
    ("198.18.0.0/15", "reserved (benchmarking)"),
    ("198.51.100.0/24", "reserved (documentation)"),
    ("203.0.113.0/24", "reserved (documentation)"),
    ("224.0.0.0/4", "multicast"),
    ("255.255.255.255/32", "broadcast"),
    ("240.0.0.0/4", "reserved"),
)
_V6_BLOCKED = _table(
    ("::/128", "unspecified"),
    ("::1/128", "loopback"),
    ("64:ff9b:1::/48", "local-use NAT64 (RFC 8215)"),
    ("100::/64", "reserved (discard-only)"),
    ("2001::/23", "reserved (IETF protocol assignments, incl. Teredo)"),
    ("2001:db8::/32", "reserved (documentation)"),
    ("3fff::/20", "reserved (documentation)"),
    ("fc00::/7", "a private network (unique local)"),
    ("fe80::/10", "link-local"),
    ("fec0::/10", "site-local (deprecated)"),
    ("ff00::/8", "multicast"),
)
_GLOBAL_UNICAST = ipaddress.IPv6Network("2000::/3")
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
#: Pools of replaced transports being closed.
_CLOSING: set[asyncio.Task[None]] = set()


def parse_networks(values: Iterable[str]) -> tuple[IPNetwork, ...]:
    """``allowedNetworks`` strings as network objects (host bits ignored); ConfigError if malformed."""
    try:
        return tuple(ipaddress.ip_network(value, strict=False) for value in values)
    except ValueError as exc:
        raise ConfigError(f"hookbus.http.allowedNetworks: {exc}") from exc


def embedded_ipv4(ip: IPAddress) -> tuple[str, ipaddress.IPv4Address] | None:
    """``(form, IPv4 address)`` carried by an IPv4-mapped, NAT64 or 6to4 IPv6 address, else None."""
    if isinstance(ip, ipaddress.IPv4Address):
        return None
    if ip.ipv4_mapped is not None:
        return "IPv4-mapped address of", ip.ipv4_mapped
    if ip in _NAT64:
        return "NAT64 address of", ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    if ip.sixtofour is not None:
        return "6to4 address of", ip.sixtofour
    return None


def _in_any(ip: IPAddress, networks: Sequence[IPNetwork]) -> bool:
    return any(ip.version == net.version and ip in net for net in networks)


def blocked_reason(ip: IPAddress, allowed: Sequence[IPNetwork] = ()) -> str | None:
    """Why the guard refuses to connect to ``ip`` (e.g. ``"loopback"``), or None when it may.

    ``allowed`` networks win over every rule, for the address itself or its embedded IPv4.
    """
    if _in_any(ip, allowed):
        return None
    embedded = embedded_ipv4(ip)
    if embedded is not None:
        form, v4 = embedded
        if _in_any(v4, allowed):
            return None
        inner = blocked_reason(v4)
        return f"{form} {v4}, {inner}" if inner else None
    table = _V4_BLOCKED if isinstance(ip, ipaddress.IPv4Address) else _V6_BLOCKED
    for network, why in table:
        if ip in network:
            return why
    if isinstance(ip, ipaddress.IPv6Address) and ip not in _GLOBAL_UNICAST:
        return "reserved (not IPv6 global unicast)"
    return None


def literal_ip(host: str) -> IPAddress | None:
    """``host`` as an IP address when it is an IP literal (brackets allowed), else None."""
    try:
        return ipaddress.ip_address(host[1:-1] if host.startswith("[") and host.endswith("]") else host)
    except ValueError:
        return None


def _refuse(host: str, ip: IPAddress, reason: str) -> SSRFBlocked:
    shown = f"{host} resolves to {ip}" if str(ip) != host else str(ip)
    return SSRFBlocked(f"SSRF guard refused {shown}: {reason} {_ALLOW_HINT}")


async def resolve_checked(host: str, port: int, allowed: Sequence[IPNetwork] = ()) -> list[IPAddress]:
    """The addresses of ``host``, each one checked; raise SSRFBlocked if any is blocked.

    An IP literal is checked without a lookup. ResolveError when the name has no address.
    """
    literal = literal_ip(host)
    if literal is not None:
        reason = blocked_reason(literal, allowed)
        if reason is not None:
            raise _refuse(host, literal, reason)
        return [literal]
    if not host:
        raise ResolveError("no host to connect to")
    try:
        infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError) as exc:
        raise ResolveError(f"cannot resolve host {host!r}: {exc}") from exc
    found: list[IPAddress] = []
    for info in infos:
        ip = ipaddress.ip_address(str(info[4][0]))
        if ip not in found:
            found.append(ip)
    if not found:
        raise ResolveError(f"host {host!r} has no address")
    for ip in found:
        reason = blocked_reason(ip, allowed)
        if reason is not None:
            raise _refuse(host, ip, reason)
    return found


__all__ = [
    "IPAddress",
    "IPNetwork",
    "blocked_reason",
    "embedded_ipv4",
    "literal_ip",
    "parse_networks",
    "resolve_checked",
]
