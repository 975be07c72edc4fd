"""The webhook sink of ``hookbus audit follow``: records POSTed as Standard Webhooks messages.

With ``batch`` above 1 (the default, 100) a request carries up to that many records, in order:
``{"type": "hookbus.decisions", "timestamp", "data": [<record>, ...]}``, signed once, under a
byte cap, gzip-compressed with ``gzip_body`` (``Content-Encoding: gzip``; the signature is over
the JSON before compression, as the receiver reads it). Its ``webhook-id`` is derived from the
records it holds (``batch_`` + a digest of their log and event ids), so a batch sent again
after a crash carries the same id; every record keeps its own ``id`` and ``log_id`` for the
receiver to drop one it already has.

With ``batch`` 1 each request is one record, ``{"type": "hookbus.decision", "timestamp",
"data": <record>}``, with the event id as ``webhook-id``.

Headers: ``webhook-id``, ``webhook-timestamp`` and, with a secret, ``webhook-signature``
(``v1,<base64 HMAC-SHA256>``, by the ``standardwebhooks`` package), signed again on each retry
so the timestamp stays fresh. Requests go through hookbus's SSRF guard (:mod:`bus.runtime.ssrf`);
``allow_networks`` opens it. A receiver's answers are handled by
:class:`~hookbus.audit.delivery.BatchPoster`.
"""

from __future__ import annotations

import asyncio
import datetime
import gzip
import hashlib
import os
from typing import Final
from urllib.parse import urlsplit

import orjson
from standardwebhooks import Webhook

from bus.errors import ConfigError
from bus.runtime.auditmetrics import SinkCounters
from hookbus.audit.delivery import BatchPoster, DeadLetters, Item, default_dead_letters, guarded_client

WEBHOOK_TYPE: Final = "hookbus.decision"
BATCH_TYPE: Final = "hookbus.decisions"


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


def batch_id(items: list[Item]) -> str:
    """The ``webhook-id`` of a batch: the same for the same records, whenever it is sent."""
    digest = hashlib.sha256()
    for log_id, data in items:
        digest.update(f"{log_id} {data.get('id')}\n".encode())
    return "batch_" + digest.hexdigest()[:32]


class HttpSink:
    """POSTs records as Standard Webhooks messages, ``batch`` per request; retries with backoff until answered."""

    kind = "http"

    def __init__(
        self,
        url: str,
        *,
        signer: Webhook | None = None,
        allow_networks: tuple[str, ...] = (),
        timeout_s: float = 10.0,
        max_delay_s: float = 30.0,
        batch: int = 1,
        gzip_body: bool = False,
        max_batch_bytes: int | None = None,
        dead_letters: DeadLetters | None = None,
        counters: SinkCounters | None = None,
    ) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ConfigError(f"--sink http: needs an http(s) URL with a host (got {url!r})")
        if batch < 1:
            raise ConfigError(f"--batch must be 1 or more (got {batch})")
        self.url = url
        self.signer = signer
        self.batch = batch
        self.gzip = gzip_body
        self.client = guarded_client(allow_networks)
        self.poster = BatchPoster(
            self.client,
            url,
            kind="webhook",
            where=parts.netloc.rpartition("@")[2],  # never the user info
            dead_letters=dead_letters or DeadLetters(default_dead_letters("audit")),
            counters=counters,
            timeout_s=timeout_s,
            max_delay_s=max_delay_s,
            max_batch_bytes=max_batch_bytes,
        )

    def message(self, items: list[Item], at: datetime.datetime) -> tuple[str, bytes, dict[str, str]]:
        """``(webhook-id, body as sent, headers)`` of ``items`` sent at ``at``."""
        stamp = at.isoformat(timespec="milliseconds")
        if self.batch == 1:
            log_id, data = items[0]
            msg_id = str(data.get("id") or log_id)
            payload = orjson.dumps({"type": WEBHOOK_TYPE, "timestamp": stamp, "data": data})
        else:
            msg_id = batch_id(items)
            payload = orjson.dumps({"type": BATCH_TYPE, "timestamp": stamp, "data": [data for _, data in items]})
        headers = {
            "content-type": "application/json",
            "webhook-id": msg_id,
            "webhook-timestamp": str(int(at.timestamp())),
        }
        if self.signer is not None:
            headers["webhook-signature"] = self.signer.sign(msg_id, at, payload.decode())
        if self.gzip:
            headers["content-encoding"] = "gzip"
            return msg_id, gzip.compress(payload, compresslevel=5), headers
        return msg_id, payload, headers

    def encode(self, items: list[Item]) -> tuple[bytes, dict[str, str]]:
        _, body, headers = self.message(items, datetime.datetime.now(datetime.UTC))
        return body, headers

    async def deliver(self, items: list[Item], stop: asyncio.Event) -> None:
        if self.batch == 1:
            for item in items:
                await self.poster.send([item], self.encode, stop)
        else:
            await self.poster.send(items, self.encode, stop)

    async def aclose(self) -> None:
        await self.client.aclose()
        self.poster.dead_letters.close()


__all__ = ["BATCH_TYPE", "WEBHOOK_TYPE", "HttpSink", "batch_id", "load_secret"]
