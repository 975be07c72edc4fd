"""What every ``hookbus audit follow`` sink shares: the sink protocol, posting a batch over HTTP until
the receiver answers for it, and the dead-letter file.

A batch sent over HTTP (:class:`BatchPoster`) ends in one of three ways, and nothing in it is
lost in any of them:

* **accepted** (2xx; for OTLP, a partial success is accepted with the rejected count): the
  follower acknowledges it;
* **refused for good** (400, 413, 422: this payload can never succeed): a batch of several
  records is split in two and each half sent again, so one bad record does not refuse the
  others; a single record refused is written to the dead-letter file with the reason, synced,
  and then acknowledged;
* **not answered** (no answer, a timeout, 408, 429, 5xx; and 401, 403, 404 and the other 4xx,
  which no record can pass until the operator fixes the URL or the credentials): sent again
  with backoff (longer when a 429 or 503 says ``Retry-After``, up to the cap), said in the log
  and the metrics, until it is answered or the follower stops.

A batch never holds more than ``max_batch_bytes`` as sent, except a single record larger than
that, which is sent alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any, Final, NamedTuple, Protocol

import httpx
import orjson

from bus.errors import ConfigError, HookError
from bus.runtime.auditmetrics import SinkCounters
from bus.runtime.retry import Backoff
from bus.runtime.ssrf import parse_networks

logger = logging.getLogger("hookbus.audit.command")

#: One record as a sink receives it: its log entry id and its JSON (with ``log_id``).
Item = tuple[str, dict[str, Any]]
#: Answers that refuse this payload for good: split the batch, or dead-letter a single record.
REFUSED_PAYLOAD: Final = frozenset({400, 413, 422})
#: The default cap on the bytes of one request body (as sent, compressed or not).
MAX_BATCH_BYTES: Final = 4 << 20


class Stopping(Exception):
    """The follower was asked to stop before the sink accepted everything."""


class Sink(Protocol):
    """Where records go. ``batch`` is how many a follower hands over at once; ``kind`` names it in metrics."""

    batch: int
    kind: str

    async def deliver(self, items: list[Item], stop: asyncio.Event) -> None: ...

    async def aclose(self) -> None: ...


class Answer(NamedTuple):
    """What a receiver said to one request."""

    #: Accepted (all of it, or with ``rejected`` records refused).
    ok: bool
    #: What went wrong, for the log, the dead-letter file and the metrics (None when ``ok``).
    problem: str | None = None
    #: The HTTP status, None when there was no answer.
    status: int | None = None
    #: Records the receiver said it rejected in an accepted request (OTLP partial success).
    rejected: int = 0
    #: Seconds the receiver asked to wait before the next try (``Retry-After`` on a 429 or 503).
    retry_after_s: float = 0.0


def retry_delay_s(answer: Answer, backoff_s: float, cap_s: float) -> float:
    """How long to wait before trying again: the backoff's delay, or longer when the receiver
    asked for it (``Retry-After``), never past ``cap_s``."""
    return min(cap_s, max(backoff_s, answer.retry_after_s))


def _retry_after_s(response: httpx.Response) -> float:
    """``Retry-After`` in seconds (the delay form; a date, or nothing, reads as 0)."""
    try:
        return max(0.0, float(response.headers.get("retry-after", "0")))
    except ValueError:
        return 0.0


class DeadLetters:
    """Records a receiver refused for good, one JSON object a line (``reason``, ``sink``, ``at``,
    ``record``), appended to ``path`` and synced before the follower acknowledges them.

    The file is opened on the first write, readable by its owner only (records may hold inputs)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._file: IO[bytes] | None = None
        self.written = 0

    async def write(self, items: list[Item], reason: str, sink: str) -> None:
        at = datetime.datetime.now(datetime.UTC).isoformat(timespec="milliseconds")
        lines = b"".join(
            orjson.dumps({"reason": reason, "sink": sink, "at": at, "record": data}) + b"\n" for _, data in items
        )
        try:
            if self._file is None:
                fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
                self._file = os.fdopen(fd, "ab")
            self._file.write(lines)
            self._file.flush()
            await asyncio.to_thread(os.fsync, self._file.fileno())
        except OSError as exc:
            raise ConfigError(f"cannot write the dead-letter file {self.path}: {exc.strerror or exc}") from exc
        self.written += len(items)
        logger.error("%d records written to the dead-letter file %s: %s", len(items), self.path, reason)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


def default_dead_letters(group: str) -> str:
    """The dead-letter file of group ``group`` when none is named: in the working folder."""
    return str(Path.cwd() / f"hookbus-audit-{group}.dead-letters.jsonl")


def guarded_client(allow_networks: tuple[str, ...]) -> httpx.AsyncClient:
    """An HTTP client behind hookbus's SSRF guard, opened for ``allow_networks``."""
    from workers.outbound.client import GuardedClient

    try:
        networks = tuple(str(net) for net in parse_networks(allow_networks))
    except ConfigError:
        raise ConfigError(f"--allow-network: not a network in CIDR notation: {', '.join(allow_networks)}") from None
    return GuardedClient((networks, 1 << 20))


#: Builds one request for a batch: ``(body as sent, headers)``.
Encoder = Callable[[list[Item]], tuple[bytes, dict[str, str]]]
#: Reads a 2xx answer: the records the receiver rejected, and why (0, None when all were taken).
PartialReader = Callable[[httpx.Response], tuple[int, str | None]]


class BatchPoster:
    """POSTs batches to ``url`` until each is answered (see the module docstring)."""

    def __init__(
        self,
        client: httpx.AsyncClient,
        url: str,
        *,
        kind: str,
        where: str,
        dead_letters: DeadLetters,
        counters: SinkCounters | None = None,
        timeout_s: float = 10.0,
        max_delay_s: float = 30.0,
        max_batch_bytes: int | None = None,
        partial: PartialReader | None = None,
    ) -> None:
        self.client = client
        self.url = url
        self.kind = kind
        self.where = where
        self.dead_letters = dead_letters
        self.counters = counters
        self.timeout_s = timeout_s
        self.max_delay_s = max_delay_s
        self.max_batch_bytes = MAX_BATCH_BYTES if max_batch_bytes is None else max_batch_bytes
        self.partial = partial

    async def send(self, items: list[Item], encode: Encoder, stop: asyncio.Event) -> None:
        """Send ``items`` in order, in as few requests as the byte cap and the receiver allow."""
        chunks = [items]
        while chunks:
            chunk = chunks.pop(0)
            body, headers = encode(chunk)
            if len(body) > self.max_batch_bytes and len(chunk) > 1:
                chunks[0:0] = _halves(chunk)
                continue
            answer = await self._until_answered(chunk, encode, (body, headers), stop)
            if answer.ok:
                if answer.rejected:
                    self._count("partial")
                    reason = f"the receiver rejected {answer.rejected} of these {len(chunk)} records: {answer.problem}"
                    await self._dead(chunk, reason)
                if self.counters is not None:
                    self.counters.records.inc(len(chunk) - min(len(chunk), answer.rejected))
            elif len(chunk) > 1:
                chunks[0:0] = _halves(chunk)
            else:
                await self._dead(chunk, answer.problem or "refused")

    async def _dead(self, chunk: list[Item], reason: str) -> None:
        await self.dead_letters.write(chunk, reason, self.kind)
        if self.counters is not None:
            self.counters.dead_letters.inc(len(chunk))

    def _count(self, error: str) -> None:
        if self.counters is not None:
            self.counters.errors.labels(error).inc()

    async def _until_answered(
        self, chunk: list[Item], encode: Encoder, first: tuple[bytes, dict[str, str]], stop: asyncio.Event
    ) -> Answer:
        """The receiver's answer to ``chunk``: accepted, or refused for good; retried until one of them
        (encoded again for each retry: a signature's timestamp must be fresh)."""
        backoff = Backoff(base_s=0.2, cap_s=self.max_delay_s)
        count = len(chunk)
        while True:
            if stop.is_set():
                raise Stopping
            body, headers = first if backoff.failures == 0 else encode(chunk)
            answer, error = await self._post(body, headers)
            if error is None:
                if backoff.failures:
                    logger.info(
                        "%s %s: answered after %d retries (%d records)", self.kind, self.where, backoff.failures, count
                    )
                return answer
            self._count(error)
            if error == "refused":
                logger.warning("%s %s: %s for a batch of %d records", self.kind, self.where, answer.problem, count)
                return answer
            if backoff.failures == 0 or backoff.failures % 10 == 0:
                logger.warning(
                    "%s %s: %s (%d records); retrying with backoff%s",
                    self.kind,
                    self.where,
                    answer.problem,
                    count,
                    "; check the URL and credentials" if error == "client" else "",
                )
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(retry_delay_s(answer, backoff.next_delay_s(), self.max_delay_s)):
                    await stop.wait()

    async def _post(self, body: bytes, headers: dict[str, str]) -> tuple[Answer, str | None]:
        """One try: the answer and, unless accepted, the error label (``refused`` for good)."""
        try:
            response = await self.client.post(self.url, content=body, headers=headers, timeout=self.timeout_s)
        except (httpx.HTTPError, HookError, OSError) as exc:
            problem = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            return Answer(False, problem), "no_answer"
        status = response.status_code
        if response.is_success:
            rejected, why = self.partial(response) if self.partial is not None else (0, None)
            return Answer(True, why, status, rejected), None
        detail = _readable(response.content)
        waits = _retry_after_s(response) if status in (429, 503) else 0.0
        answer = Answer(False, f"HTTP {status}" + (f": {detail}" if detail else ""), status, retry_after_s=waits)
        if status in REFUSED_PAYLOAD:
            return answer, "refused"
        return answer, "server" if status >= 500 or status in (408, 429) else "client"


def _readable(body: bytes, limit: int = 200) -> str:
    """What a receiver said, as text for a log line and a dead letter: a JSON or text answer as it
    is, a protobuf one (an OTLP ``google.rpc.Status``) by its printable runs."""
    text = body[: limit * 4].decode("utf-8", "replace")
    runs = "".join(ch if ch.isprintable() else " " for ch in text).split()
    return " ".join(run for run in runs if len(run) > 1 or run.isalnum())[:limit]


def _halves(chunk: list[Item]) -> list[list[Item]]:
    middle = len(chunk) // 2
    return [chunk[:middle], chunk[middle:]]


__all__ = [
    "MAX_BATCH_BYTES",
    "REFUSED_PAYLOAD",
    "Answer",
    "BatchPoster",
    "DeadLetters",
    "Item",
    "Sink",
    "Stopping",
    "default_dead_letters",
    "guarded_client",
    "retry_delay_s",
]
