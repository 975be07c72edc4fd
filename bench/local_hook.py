#!/usr/bin/env python3
"""What users run today: the same dangerous-command rule as a local Python command hook.

Claude Code spawns this once per PreToolUse: read the hook input on stdin, check the
command, print a deny decision or nothing.
"""

import json
import re
import sys

DANGEROUS = [
    r"\brm\s+-rf\s+(/|~|\$HOME)(\s|/\*?|$)",
    r"\bgit\s+push\b.*\s(--force|-f)(\s|$)",
    r"\bgit\s+reset\s+--hard\b",
    r"\|\s*(sh|bash)\b",
    r"\bsudo\s",
    r"\brm\s+-rf\s",
]


def main() -> int:
    data = json.load(sys.stdin)
    command = data.get("tool_input", {}).get("command", "")
    for pattern in DANGEROUS:
        if re.search(pattern, command):
            print(
                json.dumps(
                    {
                        "hookSpecificOutput": {
                            "hookEventName": "PreToolUse",
                            "permissionDecision": "deny",
                            "permissionDecisionReason": f"blocked by {pattern}",
                        }
                    }
                )
            )
            return 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
