"""Policy hot reload: changes are picked up, bad files are refused, the last good one stays."""

from __future__ import annotations

import os
import signal
from pathlib import Path

from bus.policy.loading import Policy
from bus.policy.reload import PolicyWatcher
from tests.conftest import async_wait_for

GOOD = "hooks:\n  PreToolUse:\n    - matcher: Bash\n      hooks:\n        - {type: rule, deny: ['Bash(rm *)']}\n"
BETTER = GOOD + "        - {type: rule, ask: ['Bash(git push *)']}\n"
BROKEN = "hooks:\n  PreToolUse:\n    - hooks:\n        - {type: rule, timeout: 0}\n"


async def test_an_edited_file_is_reloaded(tmp_path: Path) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(GOOD)
    applied: list[Policy] = []
    watcher = PolicyWatcher([path], applied.append, interval_s=0.02)
    await watcher.start()
    try:
        path.write_text(BETTER)
        os.utime(path, (1, 1))  # a distinct mtime even on coarse filesystems
        await async_wait_for(lambda: applied, 5)
        assert len(applied[-1].entries("PreToolUse")) == 2
    finally:
        await watcher.stop()


async def test_a_broken_file_keeps_the_running_policy(tmp_path: Path) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(GOOD)
    applied: list[Policy] = []
    watcher = PolicyWatcher([path], applied.append, interval_s=0.02)
    await watcher.start()
    try:
        path.write_text(BROKEN)
        os.utime(path, (2, 2))
        await async_wait_for(lambda: watcher.last_error, 5)
        assert "timeout" in (watcher.last_error or "")
        assert applied == []
        path.write_text(BETTER)
        os.utime(path, (3, 3))
        await async_wait_for(lambda: applied, 5)
        assert watcher.last_error is None
    finally:
        await watcher.stop()


async def test_sighup_reloads_at_once(tmp_path: Path) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(GOOD)
    applied: list[Policy] = []
    watcher = PolicyWatcher([path], applied.append, interval_s=3600)
    await watcher.start()
    try:
        os.kill(os.getpid(), signal.SIGHUP)
        await async_wait_for(lambda: applied, 5)
        assert len(applied[0].entries("PreToolUse")) == 1
    finally:
        await watcher.stop()
