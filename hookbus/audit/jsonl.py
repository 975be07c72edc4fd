"""The JSON Lines sink of ``hookbus audit follow``: one record a line, synced before it is acknowledged.

The sink remembers the ``log_id`` and event ``id`` of the last lines it wrote (read back from
the end of its file when it opens it, dropping a last line cut short by a crash), so a record
written just before a crash and delivered again is not written twice (the pair, because two
partitions' logs may hold the same entry id).

**Rotation.** With ``rotate_bytes`` the file is closed and renamed once it holds that many
bytes; with ``rotate_every_s`` once a write would fall in a later period (periods of that length
from the epoch, in UTC: ``3600`` rotates on the hour, ``86400`` at midnight UTC) than the file's
last write. The closed file becomes ``<stem>.<UTC time>.<suffix>`` next to it
(``audit.20250107T093000.000Z.jsonl``: names sort as the files were closed), and a new file is
started. A rotation happens only before a batch is written, when every line already written has
been acknowledged, and a rename is atomic: a crash at any point loses no line and leaves no line
in two files. If the follower starts to find its file missing or empty, it remembers the last
lines of the newest rotated file instead, so a record delivered again after a crash just past a
rotation is not written twice either.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import os
import sys
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any, Final

import orjson

from bus.errors import ConfigError
from bus.runtime.auditmetrics import SinkCounters
from bus.runtime.retry import Backoff
from hookbus.audit.delivery import Item, Stopping

logger = logging.getLogger("hookbus.audit.command")

#: How many ``log_id`` of its file's last lines the jsonl sink remembers.
REMEMBERED: Final = 10_000
_TAIL_BYTES: Final = 4 << 20


def _written_key(log_id: str, data: dict[str, Any]) -> str:
    """What the jsonl sink knows a written record by: its entry id and its event id."""
    return f"{log_id} {data.get('id')}"


def _stamp(at_ms: int) -> str:
    at = datetime.datetime.fromtimestamp(at_ms / 1000, datetime.UTC)
    return at.strftime("%Y%m%dT%H%M%S") + f".{at_ms % 1000:03d}Z"


def rotated_files(path: Path) -> list[Path]:
    """The files rotated out of ``path``, oldest first."""
    return sorted(path.parent.glob(f"{path.stem}.*Z{path.suffix}"))


class JsonlSink:
    """Appends one JSON object per line to ``path`` (``-``: standard output), synced before returning."""

    kind = "jsonl"
    batch = 100

    def __init__(
        self,
        path: str,
        *,
        batch: int = 100,
        rotate_bytes: int | None = None,
        rotate_every_s: float | None = None,
        counters: SinkCounters | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.path = path
        self.clock = clock
        self.counters = counters
        self.batch = batch
        self.rotate_bytes = rotate_bytes
        self.rotate_every_s = rotate_every_s
        self._seen: deque[str] = deque(maxlen=REMEMBERED)
        self._seen_set: set[str] = set()
        self._size = 0
        self._period = 0
        if path == "-":
            if rotate_bytes or rotate_every_s:
                raise ConfigError("--rotate-bytes and --rotate-every need a file, not standard output")
            self._file: IO[bytes] = sys.stdout.buffer
            return
        target = Path(path)
        try:
            self._recover(target)
            if not target.exists() or target.stat().st_size == 0:
                rotated = rotated_files(target)
                if rotated:
                    self._remember_tail(rotated[-1], truncate=False)
            self._open(target)
        except OSError as exc:
            raise ConfigError(f"cannot write {path}: {exc.strerror or exc}") from exc

    def _open(self, path: Path) -> None:
        self._file = open(path, "ab", buffering=0)  # unbuffered: a failed write leaves nothing behind to flush
        stat = os.fstat(self._file.fileno())
        self._size = stat.st_size
        self._period = self._period_of(stat.st_mtime if stat.st_size else self.clock())

    def _period_of(self, at_s: float) -> int:
        return int(at_s // self.rotate_every_s) if self.rotate_every_s else 0

    def _recover(self, path: Path) -> None:
        """Drop a last line cut short by a crash; remember the ``log_id`` of the last lines."""
        if path.exists():
            self._remember_tail(path, truncate=True)

    def _remember_tail(self, path: Path, *, truncate: bool) -> None:
        with open(path, "rb+" if truncate else "rb") as file:
            size = file.seek(0, os.SEEK_END)
            start = max(0, size - _TAIL_BYTES)
            file.seek(start)
            tail = file.read()
            cut = tail.rfind(b"\n") + 1
            if truncate and cut < len(tail):  # a partial line: its record was never acknowledged
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

    def _due(self, now_s: float) -> bool:
        if self._size == 0:
            return False
        if self.rotate_bytes and self._size >= self.rotate_bytes:
            return True
        return bool(self.rotate_every_s) and self._period_of(now_s) != self._period

    def _rotate(self, now_s: float) -> Path:
        """Close the file, rename it with the time, start a new one; returns the closed file's new name."""
        path = Path(self.path)
        self._file.close()
        at_ms = int(now_s * 1000)
        while (target := path.with_name(f"{path.stem}.{_stamp(at_ms)}{path.suffix}")).exists():
            at_ms += 1  # names sort as the files were closed
        os.rename(path, target)
        directory = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)
        self._open(path)
        logger.info("rotated %s to %s", path, target.name)
        return target

    async def deliver(self, items: list[Item], stop: asyncio.Event) -> None:
        fresh = [(log_id, data) for log_id, data in items if _written_key(log_id, data) not in self._seen_set]
        if not fresh:
            return
        lines = b"".join(orjson.dumps(data) + b"\n" for _, data in fresh)
        backoff = Backoff(base_s=0.2, cap_s=30.0)
        while True:
            try:
                await self._write(lines)
                break
            except OSError as exc:  # a full disk: nothing is acknowledged, and it is written again
                if self.counters is not None:
                    self.counters.errors.labels("io").inc()
                if backoff.failures == 0 or backoff.failures % 10 == 0:
                    logger.warning("cannot write %s: %s; retrying with backoff", self.path, exc.strerror or exc)
                await backoff.wait(stop)
                if stop.is_set():
                    raise Stopping from exc
        for log_id, data in fresh:
            self._remember(_written_key(log_id, data))
        if self.counters is not None:
            self.counters.records.inc(len(fresh))

    async def _write(self, lines: bytes) -> None:
        if self.path == "-":
            self._file.write(lines)
            self._file.flush()
            return
        now_s = self.clock()
        if self._due(now_s):
            await asyncio.to_thread(self._rotate, now_s)
        self._period = self._period_of(now_s)
        try:
            view = memoryview(lines)
            while view:
                view = view[self._file.write(view) or 0 :]
            await asyncio.to_thread(os.fsync, self._file.fileno())
        except OSError:
            os.ftruncate(self._file.fileno(), self._size)  # what part of the lines reached the file is cut off
            raise
        self._size += len(lines)

    async def aclose(self) -> None:
        if self.path != "-":
            self._file.close()


__all__ = ["REMEMBERED", "JsonlSink", "rotated_files"]
