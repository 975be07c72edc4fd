"""Where ``hookbus audit follow`` delivers decision-log records: a JSON Lines file, or a webhook.

A sink's :meth:`Sink.deliver` returns once every item it was given is accepted (written and
synced; answered 2xx), retrying with backoff until then, or raises :class:`Stopping` when
the follower is asked to stop first. The follower acknowledges the records only after that,
so what a crash leaves unacknowledged is delivered again:

* the **jsonl** sink remembers the ``log_id`` and event ``id`` of the last lines of its file
  when it opens it (and drops a last line cut short by a crash), so a record written just
  before a crash is not written twice (the pair, because two partitions' logs may hold the
  same entry id);
* the **http** sink posts one record per request, so at most the one in flight at a crash is
  posted again, with the same ``webhook-id`` (the event id) for the receiver to drop.

Webhooks follow Standard Webhooks: a JSON body ``{"type": "hookbus.decision", "timestamp",
"data": <record>}``, headers ``webhook-id``, ``webhook-timestamp`` and, with a secret,
``webhook-signature`` (``v1,<base64 HMAC-SHA256>``, by the ``standardwebhooks`` package).
Requests go through hookbus's SSRF guard (:mod:`bus.runtime.ssrf`); ``allow_networks`` opens it.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import os
import sys
from collections import deque
from pathlib import Path
from typing import IO, Any, Final, Protocol
from urllib.parse import urlsplit

import httpx
import orjson
from standardwebhooks import Webhook

from bus.errors import ConfigError, HookError
from bus.runtime.retry import Backoff
from bus.runtime.ssrf import parse_networks

logger = logging.getLogger("hookbus.audit.command")

#: One record as a sink receives it: its log entry id and its JSON (with ``log_id``).
Item = tuple[str, dict[str, Any]]
WEBHOOK_TYPE: Final = "hookbus.decision"
#: How many ``log_id`` of its file's last lines the jsonl sink remembers.
REMEMBERED: Final = 10_000
_TAIL_BYTES: Final = 4 << 20


class Stopping(Exception):
    """The follower was asked to stop before the sink accepted everything."""


class Sink(Protocol):
    """Where records go. ``batch`` is how many a follower hands over at once."""

    batch: int

    async def deliver(self, items: list[Item], stop: asyncio.Event) -> None: ...

    async def aclose(self) -> None: ...


def _written_key(log_id: str, data: dict[str, Any]) -> str:
    """What the jsonl sink knows a written record by: its entry id and its event id."""
    return f"{log_id} {data.get('id')}"


class JsonlSink:
    """Appends one JSON object per line to ``path`` (``-``: standard output), synced before returning."""

    batch = 100

    def __init__(self, path: str) -> None:
        self.path = path
        self._seen: deque[str] = deque(maxlen=REMEMBERED)
        self._seen_set: set[str] = set()
        if path == "-":
            self._file: IO[bytes] = sys.stdout.buffer
            return
        try:
            self._recover(Path(path))
            self._file = open(path, "ab")
        except OSError as exc:
            raise ConfigError(f"cannot write {path}: {exc.strerror or exc}") from exc

    def _recover(self, path: Path) -> None:
        """Drop a last line cut short by a crash; remember the ``log_id`` of the last lines."""
        if not path.exists():
            return
        with open(path, "rb+") as file:
            size = file.seek(0, os.SEEK_END)
            start = max(0, size - _TAIL_BYTES)
            file.seek(start)
            tail = file.read()
            cut = tail.rfind(b"\n") + 1
            if cut < len(tail):  # a partial line: its record was never acknowledged
                file.truncate(start + cut)
                logger.warning(
                    "%s: dropped a last line cut short (%d bytes); it is written again", path, len(tail) - cut
                )
        lines = tail[:cut].splitlines()[-REMEMBERED:]
        for line in lines if start == 0 else lines[1:]:  # the first line of a mid-file read may be partial
            try:
                data = orjson.loads(line)
            except orjson.JSONDecodeError:
                continue
            if isinstance(data, dict) and isinstance(data.get("log_id"), str):
                self._remember(_written_key(data["log_id"], data))

    def _remember(self, key: str) -> None:
        if len(self._seen) == self._seen.maxlen:
            self._seen_set.discard(self._seen[0])
        self._seen.append(key)
        self._seen_set.add(key)

    async def deliver(self, items: list[Item], stop: asyncio.Event) -> None:
        fresh = [(log_id, data) for log_id, data in items if _written_key(log_id, data) not in self._seen_set]
        if not fresh:
            return
        self._file.write(b"".join(orjson.dumps(data) + b"\n" for _, data in fresh))
        self._file.flush()
        if self.path != "-":
            await asyncio.to_thread(os.fsync, self._file.fileno())
        for log_id, data in fresh:
            self._remember(_written_key(log_id, data))

    async def aclose(self) -> None:
        if self.path != "-":
            self._file.close()


def load_secret(env_var: str | None) -> Webhook | None:
    """The Standard Webhooks signer for the secret in ``$env_var`` (``whsec_<base64>``), or None."""
    if env_var is None:
        return None
    secret = os.environ.get(env_var, "")
    if not secret:
        raise ConfigError(f"--secret-env {env_var}: the variable is not set or empty")
    try:
        return Webhook(secret)
    except Exception as exc:  # binascii.Error and the package's own
        raise ConfigError(f"--secret-env {env_var}: not a Standard Webhooks secret (whsec_<base64>)") from exc


class HttpSink:
    """POSTs each record as a Standard Webhooks message; retries with backoff until a 2xx."""

    batch = 1

    def __init__(
        self,
        url: str,
        *,
        signer: Webhook | None = None,
        allow_networks: tuple[str, ...] = (),
        timeout_s: float = 10.0,
        max_delay_s: float = 30.0,
    ) -> None:
        from workers.outbound.client import GuardedClient

        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ConfigError(f"--sink http: needs an http(s) URL with a host (got {url!r})")
        try:
            networks = tuple(str(net) for net in parse_networks(allow_networks))
        except ConfigError:
            raise ConfigError(f"--allow-network: not a network in CIDR notation: {', '.join(allow_networks)}") from None
        self.url = url
        self.where = parts.netloc.rpartition("@")[2]  # never the user info
        self.signer = signer
        self.timeout_s = timeout_s
        self.max_delay_s = max_delay_s
        self.client = GuardedClient((networks, 1 << 20))

    def message(self, item: Item, at: datetime.datetime) -> tuple[str, bytes, dict[str, str]]:
        """``(webhook-id, body, headers)`` of one record sent at ``at``."""
        log_id, data = item
        msg_id = str(data.get("id") or log_id)
        body = orjson.dumps({"type": WEBHOOK_TYPE, "timestamp": at.isoformat(timespec="milliseconds"), "data": data})
        headers = {
            "content-type": "application/json",
            "webhook-id": msg_id,
            "webhook-timestamp": str(int(at.timestamp())),
        }
        if self.signer is not None:
            headers["webhook-signature"] = self.signer.sign(msg_id, at, body.decode())
        return msg_id, body, headers

    async def deliver(self, items: list[Item], stop: asyncio.Event) -> None:
        for item in items:
            await self._post(item, stop)

    async def _post(self, item: Item, stop: asyncio.Event) -> None:
        backoff = Backoff(base_s=0.2, cap_s=self.max_delay_s)
        while True:
            if stop.is_set():
                raise Stopping
            msg_id, body, headers = self.message(item, datetime.datetime.now(datetime.UTC))
            try:
                response = await self.client.post(self.url, content=body, headers=headers, timeout=self.timeout_s)
                problem = None if response.is_success else f"HTTP {response.status_code}"
            except (httpx.HTTPError, HookError, OSError) as exc:
                problem = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            if problem is None:
                if backoff.failures:
                    logger.info("webhook %s: accepted %s after %d retries", self.where, msg_id, backoff.failures)
                return
            if backoff.failures == 0 or backoff.failures % 10 == 0:
                logger.warning("webhook %s: %s for %s; retrying with backoff", self.where, problem, msg_id)
            await backoff.wait(stop)

    async def aclose(self) -> None:
        await self.client.aclose()


def open_sink(
    spec: str, *, secret_env: str | None = None, allow_networks: tuple[str, ...] = (), timeout_s: float = 10.0
) -> Sink:
    """``jsonl:PATH`` or ``http:URL`` (``http:https://...`` too) as a sink."""
    kind, sep, target = spec.partition(":")
    if kind == "jsonl" and sep and target:
        if secret_env:
            raise ConfigError("--secret-env signs webhooks; a jsonl sink has nothing to sign")
        return JsonlSink(target)
    if kind == "http" and sep and target:
        return HttpSink(target, signer=load_secret(secret_env), allow_networks=allow_networks, timeout_s=timeout_s)
    raise ConfigError(f"--sink must be jsonl:PATH or http:URL (got {spec!r})")


__all__ = [
    "REMEMBERED",
    "WEBHOOK_TYPE",
    "HttpSink",
    "Item",
    "JsonlSink",
    "Sink",
    "Stopping",
    "load_secret",
    "open_sink",
]
