"""The embedded Redis keeps its data private: the folder 0700, every file in it 0600."""

from __future__ import annotations

import os
import socket
import stat
from pathlib import Path

import pytest

from hookbus.platform.redis_server import EmbeddedRedis
from tests.conftest import wait_for

pytestmark = pytest.mark.system  # starts redis-server itself


def command(server: EmbeddedRedis, *words: str) -> bytes:
    """One RESP command over the server's unix socket; the start of its reply."""
    request = f"*{len(words)}\r\n".encode() + b"".join(f"${len(w)}\r\n{w}\r\n".encode() for w in words)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(5)
        sock.connect(str(server.socket_path))
        sock.sendall(request)
        return sock.recv(256)


def modes(folder: Path) -> dict[str, int]:
    """The permission bits of ``folder`` ('.') and of every folder and regular file in it."""
    found = {".": stat.S_IMODE(folder.stat().st_mode)}
    for path in folder.rglob("*"):
        kind = path.lstat().st_mode
        if stat.S_ISDIR(kind) or stat.S_ISREG(kind):
            found[str(path.relative_to(folder))] = stat.S_IMODE(kind)
    return found


def aof_files(folder: Path) -> list[Path]:
    return [p for p in folder.rglob("*") if ".aof" in p.name and p.stat().st_size > 0]


def expected(found: dict[str, int], folder: Path) -> dict[str, int]:
    return {name: 0o700 if (folder / name).is_dir() else 0o600 for name in found}


def test_the_data_folder_and_every_file_in_it_are_private(tmp_path: Path) -> None:
    old = os.umask(0o022)  # a usual login umask: without care, Redis's files come out 0644
    try:
        with EmbeddedRedis(tmp_path / "redis", persistent=True) as server:
            assert command(server, "XADD", "hookbus:events", "*", "input", "ghp_secret").startswith(b"$")
            assert command(server, "BGREWRITEAOF").startswith(b"+")
            wait_for(lambda: aof_files(server.state_dir))
            found = modes(server.state_dir)
    finally:
        os.umask(old)
    assert any(".aof" in name for name in found) and "redis.log" in found
    assert found == expected(found, tmp_path / "redis")


def test_an_earlier_runs_open_files_are_made_private_on_start(tmp_path: Path) -> None:
    folder = tmp_path / "redis"
    (folder / "appendonlydir").mkdir(parents=True)
    (folder / "appendonlydir" / "old.aof").write_text("*1\r\n$4\r\nPING\r\n")
    (folder / "redis.log").write_text("an old log\n")
    for path, mode in ((folder, 0o755), (folder / "appendonlydir", 0o755)):
        path.chmod(mode)
    for path in (folder / "appendonlydir" / "old.aof", folder / "redis.log"):
        path.chmod(0o644)
    with EmbeddedRedis(folder, persistent=False) as server:
        found = modes(server.state_dir)
    assert {"appendonlydir", "appendonlydir/old.aof", "redis.log"} <= set(found)
    assert found == expected(found, folder)
