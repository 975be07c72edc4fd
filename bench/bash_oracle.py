"""What bash runs that hookbus's shell reader does not read: ``python bench/bash_oracle.py`` (as root).

Every Bash command of the guards' corpus (``bench/data/guards_corpus.jsonl``, see
``bench/corpus_guards.py``), and every case of ``tests/bus/rules/test_bash_oracle.py``, runs in
``bash -c`` inside a chroot that holds only bash, its libraries and fake programs (one for each
name the reader sees in the corpus) that log their argv and do nothing else: a command that
names ``/bin/rm``, ``../..`` or ``~root`` finds nothing real to run. Each argv logged must be a
command the reader read (:func:`tests.bus.rules.test_bash_oracle.covers`: its words, as written
or with the wrappers removed, or known only at run time), or the whole command cannot be judged.

Reported: how many commands ran a fake, how many the reader refused (and whether bash ran
anything of those), and every argv the reader missed. A file run by ``source FILE`` is not in the
command and not read (as ``./script.sh`` is not): counted apart, when the fake named so is the
file bash found on ``PATH``. Results: stdout, and
``bench/results/bash_oracle.json``. The chroot needs root (``chroot`` is refused otherwise).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bus.rules.bashsplit import parse_commands  # noqa: E402
from tests.bus.rules.test_bash_oracle import ENGINE_CASES, covers, nested_cases  # noqa: E402

CORPUS = REPO / "bench" / "data" / "guards_corpus.jsonl"
#: Found on this process's PATH (the commands run with PATH holding the fakes only).
CHROOT = shutil.which("chroot") or "/usr/sbin/chroot"
RECORD_END = "\x1e"
#: A function that calls itself in a background pipeline: skipped, it would fill the process table.
FORK_BOMB = re.compile(r"\(\)\s*\{[^}]*\|[^}]*&")
#: The libraries bash needs in the chroot (``ldd /bin/bash``).
LIBRARIES = ("/lib/x86_64-linux-gnu/libtinfo.so.6", "/lib/x86_64-linux-gnu/libc.so.6", "/lib64/ld-linux-x86-64.so.2")


def build_jail(jail: Path, names: set[str]) -> None:
    """A root holding bash, its libraries, ``/fake`` (a logging fake per name) and ``/work``."""
    shutil.rmtree(jail, ignore_errors=True)
    for folder in ("bin", "fake", "work", "dev", "tmp"):
        (jail / folder).mkdir(parents=True, exist_ok=True)
    shutil.copy2(shutil.which("bash") or "/bin/bash", jail / "bin" / "bash")
    for library in LIBRARIES:
        target = jail / library.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(library, target)
    recorder = f"#!/bin/bash\nprintf '%s\\0' \"$0\" \"$@\" '{RECORD_END}' >> /log\n"
    for name in names:
        fake = jail / "fake" / name
        fake.write_text(recorder)
        fake.chmod(0o755)


def run(jail: Path, case: str, timeout_s: float) -> list[list[str]]:
    """The argv of every fake bash ran for ``case`` in the chroot (its process group killed after)."""
    log = jail / "log"
    log.write_bytes(b"")
    shutil.rmtree(jail / "work", ignore_errors=True)
    (jail / "work").mkdir()
    proc = subprocess.Popen(
        [CHROOT, str(jail), "/bin/bash", "--noprofile", "--norc", "-c", f"cd /work || exit 1\n{case}"],
        env={"PATH": "/fake", "HOME": "/work", "LC_ALL": "C.UTF-8"},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # background jobs too: they would log into the next case
    except ProcessLookupError:
        pass
    proc.wait()
    records = []
    for record in log.read_bytes().decode("utf-8", "surrogateescape").split(RECORD_END + "\0"):
        if record:
            argv = record[:-1].split("\0")
            argv[0] = argv[0].removeprefix("/fake/")
            records.append(argv)
    return records


def program_names(commands: list[str]) -> set[str]:
    """The names a fake is made for: the first words of every command the reader reads."""
    names = set()
    for command in commands:
        for cmd in parse_commands(command) or ():
            for word in cmd.words[:3]:
                if re.fullmatch(r"[A-Za-z0-9_+-][A-Za-z0-9_.+-]{0,63}", word.value):
                    names.add(word.value)
    return names


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--corpus", type=Path, default=CORPUS)
    parser.add_argument("--timeout", type=float, default=3.0, help="seconds per command")
    args = parser.parse_args()
    commands = list(dict.fromkeys([*ENGINE_CASES, *nested_cases()]))
    if args.corpus.exists():
        rows = [json.loads(line) for line in args.corpus.read_text().splitlines() if line.strip()]
        bash = [r for r in rows if r.get("tool", "Bash") == "Bash"]
        commands += [r["command"] for r in bash if isinstance(r.get("command"), str)]
    commands = list(dict.fromkeys(commands))
    jail = Path(tempfile.mkdtemp(prefix="hookbus-oracle-"))
    names = program_names(commands)
    build_jail(jail, names)
    probe = subprocess.run([CHROOT, str(jail), "/bin/bash", "-c", ":"], capture_output=True, check=False)
    if probe.returncode != 0:
        sys.exit(f"bench/bash_oracle.py: cannot chroot (run it as root): {probe.stderr.decode().strip()}")
    bash_bytes = (jail / "bin" / "bash").stat().st_size
    counts = {
        "commands": len(commands),
        "ran": 0,
        "refused": 0,
        "refused_but_ran": 0,
        "missed": 0,
        "skipped": 0,
        "sourced": 0,
    }
    missed: list[dict[str, Any]] = []
    started = time.perf_counter()
    for command in commands:
        if FORK_BOMB.search(command):
            counts["skipped"] += 1
            continue
        records = run(jail, command, args.timeout)
        if (jail / "bin" / "bash").stat().st_size != bash_bytes:  # a command overwrote it: start again
            build_jail(jail, names)
        read = parse_commands(command)
        counts["ran"] += bool(records)
        if read is None:
            counts["refused"] += 1
            counts["refused_but_ran"] += bool(records)
            continue
        sourced = [argv for argv in records if argv[0] == "/bin/bash"]  # a fake run by ``source NAME``
        counts["sourced"] += bool(sourced)
        lost = [argv for argv in records if argv not in sourced and not any(covers(cmd, argv, "/work") for cmd in read)]
        if lost:
            counts["missed"] += 1
            missed.append({"command": command, "ran": lost[:3], "read": [cmd.plain for cmd in read][:6]})
    shutil.rmtree(jail, ignore_errors=True)
    print(json.dumps(counts), f"in {time.perf_counter() - started:.0f} s")
    for miss in missed:
        print(f"- {miss['command']!r}: bash ran {miss['ran']}, hookbus read {miss['read']}")
    results = REPO / "bench" / "results"
    results.mkdir(exist_ok=True)
    (results / "bash_oracle.json").write_text(json.dumps({"counts": counts, "missed": missed}, indent=1))


if __name__ == "__main__":
    main()
