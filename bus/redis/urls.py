"""Redis URLs: masked for logs, marked as a Redis Cluster's seed, or naming a master through Sentinel.

A Sentinel URL names the async queue's Redis, found through Redis Sentinel.

arq (the async queue) runs on one Redis, not on a Redis Cluster. For failover that Redis may be
watched by Sentinels: hookbus then asks them for the current master of a service and follows
it to the replica they promote. Such a queue Redis (``HOOKBUS_QUEUE_REDIS_URL``) is named by::

    redis+sentinel://[[user]:password@]host[:port][,host[:port]...]/service[/db][?sentinel_password=...]

- ``host:port``: the Sentinels (port 26379 when left out), asked in turn; an IPv6 host in brackets.
- ``user`` and ``password``: the master's credentials (``requirepass`` or an ACL user), as in a
  ``redis://`` URL; percent-encode reserved characters.
- ``service``: the master's name in the Sentinels' configuration (``sentinel monitor <service> ...``).
- ``db``: the master's database (0 when left out).
- ``sentinel_password``: the Sentinels' own password (``requirepass`` in ``sentinel.conf``), when
  they have one; nothing else goes in the query.

TLS (to the master or to the Sentinels) is not supported. This module only reads the syntax
(it imports no Redis client: settings check it at start-up); :func:`workers.jobs.enqueue.arq_pool`
connects.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Final
from urllib.parse import parse_qsl, unquote, urlsplit, urlunsplit

from bus.errors import ConfigError

SENTINEL_SCHEME: Final = "redis+sentinel"
#: The accepted form, as error messages show it.
SENTINEL_SYNTAX: Final = "redis+sentinel://[[user]:password@]host[:port][,host[:port]...]/service[/db]"
DEFAULT_SENTINEL_PORT: Final = 26379
_OPTIONS: Final = frozenset({"sentinel_password"})


#: Query options that carry a password (``unix://...?password=``, a Sentinel URL's ``sentinel_password``).
_SECRET_OPTIONS = re.compile(r"(^|&)((?:sentinel_)?password=)[^&]*")


def mask_url(url: str) -> str:
    """``url`` with any password replaced by ``***`` (for logs and reprs); a Sentinel URL's too."""
    _, scheme_end, rest = url.partition("://")  # not urlsplit: a Sentinel URL lists several hosts
    userinfo, at, _ = re.split(r"[/?#]", rest, maxsplit=1)[0].rpartition("@") if scheme_end else ("", "", "")
    if at and ":" in userinfo:
        url = url.replace(f"{userinfo}@", f"{userinfo.partition(':')[0]}:***@", 1)
    head, question, query = url.partition("?")
    return head + question + _SECRET_OPTIONS.sub(r"\1\2***", query)


#: URL schemes that name the seed node of a Redis Cluster, and the plain scheme of each.
CLUSTER_SCHEMES: Final = {"redis+cluster": "redis", "rediss+cluster": "rediss"}


def cluster_url(url: str) -> str:
    """``url`` marked as the seed of a Redis Cluster (``redis://`` becomes ``redis+cluster://``)."""
    parts = urlsplit(url)
    if parts.scheme in CLUSTER_SCHEMES:
        return url
    if parts.scheme not in ("redis", "rediss"):
        raise ConfigError(f"a Redis Cluster is reached over redis:// or rediss://, not {parts.scheme}://")
    return urlunsplit(parts._replace(scheme=f"{parts.scheme}+cluster"))


@dataclasses.dataclass(frozen=True, slots=True)
class SentinelURL:
    """A parsed ``redis+sentinel://`` URL (passwords stay out of the repr)."""

    sentinels: tuple[tuple[str, int], ...]
    service_name: str
    db: int = 0
    username: str | None = None
    password: str | None = dataclasses.field(default=None, repr=False)
    sentinel_password: str | None = dataclasses.field(default=None, repr=False)


def is_sentinel_url(url: str) -> bool:
    return url.lower().startswith(f"{SENTINEL_SCHEME}://")


def parse_sentinel_url(url: str) -> SentinelURL:
    """The parts of a Sentinel URL (see the module docstring); ConfigError saying what is wrong."""
    if not is_sentinel_url(url):
        raise _malformed(f"it does not start with {SENTINEL_SCHEME}://")
    rest = url[len(SENTINEL_SCHEME) + 3 :]
    if "#" in rest:
        raise _malformed("a fragment (#) has no meaning in it")
    rest, _, query = rest.partition("?")
    netloc, _, path = rest.partition("/")
    userinfo, at, hosts = netloc.rpartition("@")
    username = password = None
    if at:
        user, colon, secret = userinfo.partition(":")
        username, password = unquote(user) or None, unquote(secret) if colon else None
    if not hosts:
        raise _malformed("no Sentinel given")
    sentinels = tuple(_host_port(item) for item in hosts.split(","))
    service_name, db = _service_and_db(path)
    options = _options(query)
    return SentinelURL(sentinels, service_name, db, username, password, options.get("sentinel_password"))


def _host_port(item: str) -> tuple[str, int]:
    if item.startswith("["):
        host, bracket, port = item[1:].partition("]")
        if not bracket or (port and not port.startswith(":")):
            raise _malformed(f"the Sentinel {item!r} is not [IPv6 address]:port")
        port = port[1:]
    else:
        host, _, port = item.partition(":")
    if not host:
        raise _malformed(f"a Sentinel in the list has no host ({item!r})")
    if not port:
        return host, DEFAULT_SENTINEL_PORT
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise _malformed(f"the Sentinel {item!r} has no valid port")
    return host, int(port)


def _service_and_db(path: str) -> tuple[str, int]:
    segments = path.split("/") if path else []
    if segments and segments[-1] == "" and len(segments) > 1:
        segments.pop()  # a trailing slash
    if not segments or not segments[0]:
        raise _malformed("the service name (the master's name in the Sentinels' configuration) is missing")
    if len(segments) > 2:
        raise _malformed(f"the path /{path} has more than the service name and the database")
    db = segments[1] if len(segments) == 2 else "0"
    if not db.isdigit():
        raise _malformed(f"the database {db!r} is not a number")
    return unquote(segments[0]), int(db)


def _options(query: str) -> dict[str, str]:
    try:
        pairs = parse_qsl(query, keep_blank_values=True, strict_parsing=bool(query))
    except ValueError as exc:
        raise _malformed(f"its query is not name=value pairs ({exc})") from exc
    unknown = sorted({name for name, _ in pairs} - _OPTIONS)
    if unknown:
        raise _malformed(f"unknown option {', '.join(unknown)} (only sentinel_password is taken)")
    return dict(pairs)


def _malformed(why: str) -> ConfigError:
    return ConfigError(f"not a valid Sentinel URL: {why}; the form is {SENTINEL_SYNTAX}")


__all__ = [
    "CLUSTER_SCHEMES",
    "DEFAULT_SENTINEL_PORT",
    "SENTINEL_SCHEME",
    "SENTINEL_SYNTAX",
    "SentinelURL",
    "cluster_url",
    "is_sentinel_url",
    "mask_url",
    "parse_sentinel_url",
]
