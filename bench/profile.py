"""Profiling helpers for the benchmarks: py-spy on a running role, summarised as text.

``record(pid, seconds, out)`` runs ``py-spy record --format raw`` (collapsed stacks) on a
process for a bounded time; ``top(path)`` reads such a file and returns the functions with
the most samples, by self time and by inclusive time. ``python bench/profile.py FILE`` prints
the summary of a file recorded earlier. py-spy must be installed (``pip install py-spy``) and
allowed to read the process (root, or ptrace permitted).
"""

from __future__ import annotations

import collections
import re
import shutil
import subprocess
import sys
from pathlib import Path

_LOCATION = re.compile(r" \((?P<file>[^()]*?):(?P<line>\d+)\)$")


def record(pid: int, seconds: float, out: Path, rate_hz: int = 200) -> subprocess.Popen[bytes] | None:
    """Start py-spy on ``pid`` for ``seconds`` (collapsed stacks into ``out``); None without py-spy."""
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    if not Path(spy).exists():
        print("py-spy not found: pip install py-spy", file=sys.stderr)
        return None
    return subprocess.Popen(
        [
            spy,
            "record",
            "--pid",
            str(pid),
            "--duration",
            str(max(1, round(seconds))),
            "--rate",
            str(rate_hz),
            "--format",
            "raw",
            "--output",
            str(out),
            "--nonblocking",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def _short(frame: str) -> str:
    """``function (file.py:line)`` with the file's path cut to package/module."""
    match = _LOCATION.search(frame)
    if not match:
        return frame
    path = match["file"]
    for marker in ("site-packages/", "/work/main/", "python3.11/"):
        if marker in path:
            path = path.split(marker, 1)[1]
            break
    return f"{frame[: match.start()]} ({path})"


def top(path: Path, n: int = 15) -> dict[str, list[tuple[str, float]]]:
    """The ``n`` functions with most samples, by self and inclusive share (0..1) of all samples."""
    own: collections.Counter[str] = collections.Counter()
    inclusive: collections.Counter[str] = collections.Counter()
    total = 0
    for line in path.read_text(errors="replace").splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = [
            _short(f) for f in stack.split(";") if f and not f.startswith("process ") and not f.startswith("thread ")
        ]
        if not frames:
            continue
        total += count
        own[frames[-1]] += count
        for frame in set(frames):
            inclusive[frame] += count
    total = total or 1
    return {
        "self": [(f, c / total) for f, c in own.most_common(n)],
        "inclusive": [(f, c / total) for f, c in inclusive.most_common(n)],
        "samples": [("", float(total))],
    }


def report(path: Path, title: str, n: int = 15) -> str:
    """A markdown summary of one recording."""
    summary = top(path, n)
    lines = [f"#### {title} ({int(summary['samples'][0][1])} samples)", "", "| self | function |", "|---|---|"]
    lines += [f"| {share:.1%} | `{frame}` |" for frame, share in summary["self"]]
    lines += ["", "| inclusive | function |", "|---|---|"]
    lines += [f"| {share:.1%} | `{frame}` |" for frame, share in summary["inclusive"]]
    return "\n".join(lines)


if __name__ == "__main__":
    for name in sys.argv[1:]:
        print(report(Path(name), Path(name).name))
        print()
