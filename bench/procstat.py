"""What a process costs, read from /proc (Linux): CPU seconds, context switches, resident memory,
open file descriptors.

On a 2-core machine shared by the load generator, Redis and every role, a role's throughput
depends on what else runs; its CPU per request does not, so the benchmarks report both.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

_TICK_S = 1 / os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int) -> float:
    """User + system CPU seconds used by ``pid`` so far (0.0 once it has gone)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rpartition(")")[2].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) * _TICK_S


def switches(pid: int) -> tuple[int, int]:
    """Context switches of all of ``pid``'s threads so far: (voluntary, involuntary).

    A voluntary switch is a wait (for a socket, a lock, the next event), so each is a later
    wake-up; an involuntary one is a preemption by another process wanting the core.
    """
    voluntary = involuntary = 0
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return 0, 0
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/status") as status:
                for line in status:
                    if line.startswith("voluntary_ctxt_switches:"):
                        voluntary += int(line.split()[1])
                    elif line.startswith("nonvoluntary_ctxt_switches:"):
                        involuntary += int(line.split()[1])
        except OSError:  # the thread ended meanwhile
            continue
    return voluntary, involuntary


def rss_bytes(pid: int) -> int:
    """Resident set size of ``pid`` in bytes (0 once it has gone)."""
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def fd_count(pid: int) -> int:
    """Open file descriptors of ``pid`` (0 once it has gone)."""
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return 0


def usage(pids: dict[str, int]) -> dict[str, int]:
    """``<name>_rss`` (bytes) and ``<name>_fds`` of each named process, now."""
    sample: dict[str, int] = {}
    for name, pid in pids.items():
        sample[f"{name}_rss"] = rss_bytes(pid)
        sample[f"{name}_fds"] = fd_count(pid)
    return sample


class CpuMeter:
    """CPU seconds (and context switches) of a set of named processes between :meth:`start` and :meth:`stop`."""

    def __init__(self, pids: dict[str, int]) -> None:
        self.pids = pids
        self._start: dict[str, float] = {}
        self._start_switches: dict[str, tuple[int, int]] = {}
        self.used_s: dict[str, float] = {}
        #: (voluntary, involuntary) context switches of each process over the measurement.
        self.switches: dict[str, tuple[int, int]] = {}

    def start(self) -> None:
        self._start = {name: cpu_s(pid) for name, pid in self.pids.items()}
        self._start_switches = {name: switches(pid) for name, pid in self.pids.items()}

    def stop(self) -> dict[str, float]:
        self.used_s = {name: cpu_s(pid) - self._start.get(name, 0.0) for name, pid in self.pids.items()}
        for name, pid in self.pids.items():
            (v0, i0), (v1, i1) = self._start_switches.get(name, (0, 0)), switches(pid)
            self.switches[name] = (v1 - v0, i1 - i0)
        return self.used_s

    def per_request_switches(self, requests: int) -> dict[str, tuple[float, float]]:
        """(voluntary, involuntary) context switches per request of each process (after :meth:`stop`)."""
        return {name: (v / max(requests, 1), i / max(requests, 1)) for name, (v, i) in self.switches.items()}

    def per_request_us(self, requests: int, names: Iterable[str] | None = None) -> dict[str, float]:
        """CPU µs per request of each process (after :meth:`stop`)."""
        chosen = list(names) if names is not None else list(self.used_s)
        return {name: self.used_s[name] / max(requests, 1) * 1e6 for name in chosen}


__all__ = ["CpuMeter", "cpu_s", "fd_count", "rss_bytes", "switches", "usage"]
