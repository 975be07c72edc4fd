"""Shell input in the agents' own forms is judged as the command bash runs, or not at all.

Each case goes through the agent's dialect, as the gateway translates it, and then through a
deny list: an argv that runs a shell, keystrokes typed into a running one and several commands
run each on its own must all meet ``Bash(rm -rf /)``; what cannot be told raises (the gateway
answers a deny).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from bus.dialects import dialect_for
from bus.dialects.shellinput import argv_command, joined_commands, keystrokes_command, shell_script
from bus.policy.rulelists import compile_lists, first_verdict

CWD = "/work/repo"
DENY = compile_lists(("Bash(rm -rf /)", "Edit(**/.env)"), (), ("Bash(ls *)", "Bash(git status)"))
PATCH = "*** Begin Patch\n*** Add File: .env\n+TOKEN=x\n*** End Patch"


def judged(dialect: str, hook_input: dict[str, Any]) -> tuple[str, str] | None:
    return first_verdict(DENY, dialect_for(dialect).to_canonical(hook_input))


def codex(tool: str, tool_input: dict[str, Any]) -> dict[str, Any]:
    return {
        "session_id": "s",
        "cwd": CWD,
        "hook_event_name": "PreToolUse",
        "tool_name": tool,
        "tool_input": tool_input,
    }


def copilot(tool: str, args: dict[str, Any]) -> dict[str, Any]:
    return {"sessionId": "s", "cwd": CWD, "toolName": tool, "toolArgs": args}


def cline(*commands: str) -> dict[str, Any]:
    call = {"id": "t", "name": "run_commands", "input": {"commands": list(commands)}}
    return {"hookName": "tool_call", "taskId": "conv_1", "workspaceRoots": [CWD], "tool_call": call}


@pytest.mark.parametrize(
    ("argv", "script"),
    [
        (["bash", "-lc", "rm -rf /"], "rm -rf /"),
        (["/bin/sh", "-c", "rm -rf /", "name", "arg"], "rm -rf /"),
        (["zsh", "--login", "-ec", "rm -rf /"], "rm -rf /"),
        (["bash", "-eo", "pipefail", "-c", "rm -rf /"], "rm -rf /"),
        (["dash", "-c", "--", "rm -rf /"], "rm -rf /"),
        (["bash", "script.sh"], None),
        (["bash", "-c"], None),
        (["python3", "-c", "x"], None),
    ],
)
def test_a_shell_given_c_runs_its_script(argv: list[str], script: str | None) -> None:
    assert shell_script(argv) == script
    assert argv_command(argv) == (script if script is not None else " ".join(argv))


def test_other_argv_reads_as_the_program_ran_it() -> None:
    assert argv_command(["git", "commit", "-m", "a b; rm -rf /"]) == "git commit -m 'a b; rm -rf /'"


@pytest.mark.parametrize(
    "argv",
    [["bash", "-lc", "rm -rf /"], ["sh", "-c", "cd x && rm -rf /"], ["/usr/bin/zsh", "-c", "ls; rm -rf /"]],
)
def test_codex_argv_running_a_shell_is_judged_as_its_script(argv: list[str]) -> None:
    assert judged("codex", codex("shell", {"command": argv})) == ("deny", "Bash(rm -rf /)")
    assert judged("codex", codex("exec_command", {"cmd": argv})) == ("deny", "Bash(rm -rf /)")


def test_codex_argv_of_a_harmless_script_is_allowed_as_it_runs() -> None:
    assert judged("codex", codex("shell", {"command": ["bash", "-lc", "git status"]})) == ("allow", "Bash(git status)")


def test_codex_apply_patch_inside_an_argv_is_read_as_the_patch() -> None:
    argv = ["bash", "-lc", f"apply_patch <<'EOF'\n{PATCH}\nEOF"]
    out = dialect_for("codex").to_canonical(codex("shell", {"command": argv}))
    assert out["tool_name"] == "Write" and out["tool_input"]["file_paths"] == [f"{CWD}/.env"]
    assert first_verdict(DENY, out) == ("deny", "Edit(**/.env)")
    argv = ["apply_patch", PATCH]  # the patch as the program's argument
    assert judged("codex", codex("shell", {"command": argv})) == ("deny", "Edit(**/.env)")


@pytest.mark.parametrize(
    ("keys", "command"),
    [
        ("rm -rf /\n", "rm -rf /"),
        ("rm -rf /\r", "rm -rf /"),
        ("rm -rf /tmpx\x7f\x7f\x7f\x7f\n", "rm -rf /"),
        ("ls\x15rm -rf /\n", "rm -rf /"),
        ("rm -rf /home/x\x17/\n", "rm -rf /"),
        ("git status\x03rm -rf /\n", "rm -rf /"),
        ("echo a\nrm -rf /", "echo a\nrm -rf /"),
        ("", ""),
    ],
)
def test_keystrokes_are_the_lines_they_type(keys: str, command: str) -> None:
    assert keystrokes_command(keys) == command


@pytest.mark.parametrize("keys", ["rm -rf ~/.ss\t\n", "\x1b[A\n", "x\x1bOA", "\x12rm\n", "rm -rf /x\x04"])
def test_keys_whose_effect_the_shell_decides_cannot_be_judged(keys: str) -> None:
    with pytest.raises(ValueError, match="cannot be judged"):
        keystrokes_command(keys)


def test_codex_write_stdin_is_judged_as_a_bash_command() -> None:
    hook_input = codex("write_stdin", {"session_id": 3, "chars": "rm -rf /\n"})
    assert judged("codex", hook_input) == ("deny", "Bash(rm -rf /)")
    out = dialect_for("codex").to_canonical(hook_input)
    assert out["tool_name"] == "Bash" and out["tool_input"]["session_id"] == 3
    with pytest.raises(ValueError):
        dialect_for("codex").to_canonical(codex("write_stdin", {"session_id": 3, "chars": "\x1b[A\n"}))


def test_codex_cannot_be_given_back_rewritten_keystrokes() -> None:
    agent_input = codex("write_stdin", {"session_id": 3, "chars": "ls\n"})
    rewrite = {"hookSpecificOutput": {"hookEventName": "PreToolUse", "updatedInput": {"command": "pwd"}}}
    reply = dialect_for("codex").to_agent("PreToolUse", rewrite, agent_input)
    assert reply["hookSpecificOutput"]["permissionDecision"] == "deny"


@pytest.mark.parametrize("keys", ["rm -rf /\n", "rm -rf /{enter}", "rm -rf /x{backspace}{enter}"])
def test_copilot_write_bash_is_judged_as_a_bash_command(keys: str) -> None:
    hook_input = copilot("write_bash", {"shellId": "1", "input": keys, "delay": 5})
    assert judged("copilot", hook_input) == ("deny", "Bash(rm -rf /)")
    pascal = {"hook_event_name": "PreToolUse", "session_id": "s", "cwd": CWD, "tool_name": "write_bash"}
    assert judged("copilot", {**pascal, "tool_input": {"shellId": "1", "input": keys}}) == ("deny", "Bash(rm -rf /)")


def test_copilot_write_bash_arrow_keys_cannot_be_judged_and_rewrites_are_denied() -> None:
    with pytest.raises(ValueError):
        dialect_for("copilot").to_canonical(copilot("write_bash", {"shellId": "1", "input": "{up}{enter}"}))
    agent_input = copilot("write_bash", {"shellId": "1", "input": "ls\n"})
    rewrite = {"hookSpecificOutput": {"hookEventName": "PreToolUse", "updatedInput": {"command": "pwd"}}}
    reply = dialect_for("copilot").to_agent("PreToolUse", rewrite, agent_input)
    assert reply["permissionDecision"] == "deny" and "modifiedArgs" not in reply


@pytest.mark.parametrize(
    "commands",
    [
        ["cat <<'EOF'", "rm -rf /"],
        ["echo 'x", "rm -rf /", "'"],
        ['echo "x', "rm -rf /", '"'],
        ["echo x \\", "rm -rf /"],
        ["ls $(", "rm -rf /", ")"],
    ],
)
def test_a_run_commands_entry_cannot_hide_the_next(commands: list[str]) -> None:
    with pytest.raises(ValueError):
        joined_commands(commands)
    with pytest.raises(ValueError):
        dialect_for("cline").to_canonical(cline(*commands))


def test_run_commands_that_each_read_alone_are_judged_each() -> None:
    assert judged("cline", cline("ls -la", "cat <<'EOF'\nhello\nEOF", "rm -rf /")) == ("deny", "Bash(rm -rf /)")
    assert judged("cline", cline("ls -la", "ls src")) == ("allow", "Bash(ls *)")
    assert joined_commands(["rm -rf /"]) == "rm -rf /" and joined_commands([]) == ""


@pytest.mark.parametrize("command", [["bash", "-lc", 1], {"argv": ["rm", "-rf", "/"]}, 7])
def test_a_codex_command_that_is_no_text_or_argv_cannot_be_judged(command: object) -> None:
    with pytest.raises(ValueError, match="neither a string nor an argv"):
        dialect_for("codex").to_canonical(codex("shell", {"command": command}))


async def test_through_a_live_gateway_what_cannot_be_judged_is_denied(platform: Callable[..., Any]) -> None:
    allow_all = 'hooks:\n  PreToolUse:\n    - hooks: [{type: rule, allow: ["Bash(*)"]}]\n'
    async with platform(allow_all) as p:
        hidden = await p.post(cline("cat <<'EOF'", "rm -rf /"), headers={"X-Hookbus-Dialect": "cline"})
        keys = await p.post(codex("write_stdin", {"session_id": 1, "chars": "\x1b[A\n"}), params={"dialect": "codex"})
        fine = await p.post(cline("ls", "git status"), headers={"X-Hookbus-Dialect": "cline"})
    assert hidden.headers["X-Hookbus-Refused"].startswith("dialect_error: ")
    assert "hookbus denied" in hidden.json()["overrideInput"]["commands"][0]
    assert keys.json()["hookSpecificOutput"]["permissionDecision"] == "deny"
    assert "X-Hookbus-Refused" not in fine.headers and fine.json() == {}
