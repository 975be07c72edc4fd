"""The state folder lock: held while its process lives, gone when it dies however it dies."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from bus.errors import RedisServerError
from hookbus.platform.redis_server import EmbeddedRedis
from hookbus.platform.state import LOCK_NAME, STATE_NAME, FolderLock, is_held, running, write_json
from tests.conftest import wait_for

pytestmark = pytest.mark.system  # starts processes (or servers) itself

HOLD = """
import sys
from hookbus.platform.state import FolderLock
lock = FolderLock(sys.argv[1])
print("held" if lock.acquire() else "busy", flush=True)
sys.stdin.read()
"""


def holder(path: Path, children: list[subprocess.Popen[bytes]]) -> subprocess.Popen[bytes]:
    """A process that takes the lock on ``path`` and keeps it until its stdin closes or it is killed."""
    process = subprocess.Popen([sys.executable, "-c", HOLD, str(path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    children.append(process)
    assert process.stdout is not None and process.stdout.readline() == b"held\n"
    return process


def test_the_lock_is_exclusive_and_never_stale(tmp_path: Path, children: list[subprocess.Popen[bytes]]) -> None:
    path = tmp_path / "state" / LOCK_NAME
    assert not is_held(path)  # no file yet
    process = holder(path, children)
    assert is_held(path)
    assert FolderLock(path).acquire(wait_s=0.05) is False
    process.send_signal(signal.SIGKILL)  # a crash: nothing cleans up, the kernel drops the lock
    process.wait(timeout=10)
    assert path.exists() and not is_held(path)
    mine = FolderLock(path)
    assert mine.acquire()
    assert is_held(path)
    mine.release()
    assert not is_held(path)


def test_running_believes_the_state_file_only_while_the_lock_is_held(
    tmp_path: Path, children: list[subprocess.Popen[bytes]]
) -> None:
    write_json(tmp_path / STATE_NAME, {"pid": 4242, "port": 8787})
    assert running(tmp_path) is None  # a crashed run's file means nothing
    process = holder(tmp_path / LOCK_NAME, children)
    assert running(tmp_path) == {"pid": 4242, "port": 8787}
    (tmp_path / STATE_NAME).unlink()
    assert running(tmp_path) == {"status": "starting"}
    process.communicate(timeout=10)  # closes its stdin: it exits, the lock goes with it
    assert running(tmp_path) is None


@pytest.mark.timeout(60)
def test_one_embedded_redis_per_folder(tmp_path: Path) -> None:
    first = EmbeddedRedis(tmp_path / "redis", persistent=False).start()
    try:
        with pytest.raises(RedisServerError) as refused:
            EmbeddedRedis(tmp_path / "redis", persistent=False).start()
        assert str(refused.value) == (
            f"an embedded Redis already runs in {tmp_path / 'redis'} (pid {first.pid}); "
            "pass another --state-dir to run a second one"
        )
        assert first._answers_ping()  # the refused one did not touch the running server's socket
    finally:
        first.stop()
    second = EmbeddedRedis(tmp_path / "redis", persistent=False).start()
    second.stop()


def test_the_redis_lock_lives_as_long_as_redis(tmp_path: Path) -> None:
    server = EmbeddedRedis(tmp_path / "redis", persistent=False).start()
    assert server._process is not None
    server._lock.release()  # as if this process had died: redis-server holds its copy
    assert is_held(tmp_path / "redis" / "redis.lock")
    server._process.terminate()
    server._process.wait(timeout=10)
    wait_for(lambda: not is_held(tmp_path / "redis" / "redis.lock"), timeout_s=5)
    server.stop()
