"""Memory held for long Bash commands: ``python bench/command_cache.py [REPO]``.

Runs the example policy's ``rule`` handlers in-process on 3,000 distinct heredoc commands of
100 KB each (a model writing files through Bash) and prints the process's RSS before and
after. The caches keyed by commands (parsed commands, their texts) keep short commands only,
so RSS should stay flat; ``REPO`` (default: this checkout) lets a worktree of an older commit
be measured the same way.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(sys.argv[1]).resolve() if len(sys.argv) > 1 else Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bus.policy.loading import load_policy  # noqa: E402
from workers.handlers.rule import evaluate_rules  # noqa: E402

COMMANDS = 3000
BODY_CHARS = 100_000


def rss_mib() -> float:
    """This process's resident set, in MiB."""
    return int(Path("/proc/self/statm").read_text().split()[1]) * 4096 / 2**20


def main() -> None:
    policy = load_policy([ROOT / "examples" / "policy.yaml"])
    handlers = [entry.handler for entry in policy.entries("PreToolUse") if entry.handler.type == "rule"]
    body = "y" * BODY_CHARS
    before = rss_mib()
    for i in range(COMMANDS):
        hook_input = {
            "tool_name": "Bash",
            "cwd": "/tmp",
            "tool_input": {"command": f"cat > f{i}.txt <<'EOF'\n{i}{body}\nEOF"},
        }
        for handler in handlers:
            evaluate_rules(handler, hook_input)
    print(
        f"{ROOT}: RSS {before:.0f} -> {rss_mib():.0f} MiB after {COMMANDS:,} distinct "
        f"{BODY_CHARS // 1000} KB heredoc commands"
    )


if __name__ == "__main__":
    main()
