"""Real bash with only fake programs on ``PATH``: the oracle of what a command runs.

Each fake program appends its argv (each argument NUL-terminated, then :data:`RECORD_END`) to
the file ``$HOOKBUS_ORACLE_LOG`` (or ``$LOG``, for cases that clear the environment) and does
nothing else. :func:`run_fakes` runs one case in ``bash -c`` in a fresh work folder of the
sandbox and returns every argv the fakes recorded.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

BASH = shutil.which("bash") or "/bin/bash"
#: Ends each recorded argv (an argument may be empty, or hold newlines).
RECORD_END = "\x1e"
#: A fake program: records its argv and exits 0.
RECORDER = f'#!/bin/sh\nprintf \'%s\\0\' "$0" "$@" \'{RECORD_END}\' >> "${{HOOKBUS_ORACLE_LOG:-$LOG}}"\n'


def run_fakes(sandbox: Path, case: str, timeout_s: float, *, link_bin: bool = False) -> list[list[str]]:
    """The argv of every fake program in ``sandbox/bin`` that bash ran for ``case``, in order
    (``argv[0]`` as bash passed it). ``link_bin``: the work folder gets a ``bin`` link to the
    fakes, for cases that name a program by a pattern."""
    work = sandbox / "work"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir()
    if link_bin:
        (work / "bin").symlink_to(sandbox / "bin")
    log = sandbox / "log"
    log.write_bytes(b"")
    env = {"PATH": str(sandbox / "bin"), "HOME": str(work), "HOOKBUS_ORACLE_LOG": str(log), "LC_ALL": "C.UTF-8"}
    subprocess.run(
        [BASH, "--noprofile", "--norc", "-c", case],
        cwd=work,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=timeout_s,
        check=False,
    )
    records = log.read_bytes().decode("utf-8", "surrogateescape").split(RECORD_END + "\0")
    return [record[:-1].split("\0") for record in records if record]  # each argument ends with a NUL


__all__ = ["BASH", "RECORDER", "RECORD_END", "run_fakes"]
