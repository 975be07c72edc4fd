"""Codex CLI obeys hookbus: the pinned ``codex exec``, headless, against a real ``hookbus up``.

Codex runs in a network namespace with only loopback, its model is the scripted fake Responses
API (:mod:`tests.agents.fake_responses`) on a socket inside it, and it reaches the gateway
through a relay. Codex is configured by ``hookbus install codex`` itself (run inside the
namespace, so its check reaches the gateway), in user scope (``$CODEX_HOME/hooks.json``), and
run with ``--dangerously-bypass-hook-trust``: without it ``codex exec`` silently skips hooks
nobody has trusted. The first test proves that this setup fires hooks at all, with a native
hook and no hookbus, so that no other test can pass because its hooks never ran. Each scenario
is one Codex run whose prompt names it (``SCENARIO=name``); the fake answers by that name.
"""

from __future__ import annotations

import json
import re
import shlex
import sys
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest
import redis as redis_sync

from bus.redis.keys import Keyspace
from tests.agents import fleet
from tests.agents.fake_responses import MODEL, FakeResponses, Reply, last_is_tool_output, messages, shell, text
from tests.agents.fake_responses import tool_outputs as outputs_of
from tests.agents.harness import Completed, LoopbackNetns, base_env, loopback_netns, pinned, serve_http
from tests.ci import missing
from tests.conftest import wait_for
from tests.up import UpProcess, running_up

pytestmark = [pytest.mark.system, pytest.mark.timeout(240)]

TOKEN = "tok-acme"
FORCE_PUSH = "git push --force origin main; echo ran > pushed.txt"
PATCH = "*** Begin Patch\n*** Add File: ok.txt\n+fine\n*** Add File: protected/secret.txt\n+no\n*** End Patch"
#: What the fake model does first in each scenario (then it says "done").
COMMANDS = {
    "native": "echo native > native.txt",
    "deny": FORCE_PUSH,
    "allow": "echo allowed > allowed.txt",
    "rewrite": "echo rewrite-me > original.txt",
    "context": "echo context-me > context.txt",
    "patch": f"apply_patch <<'EOF'\n{PATCH}\nEOF",
    "open": FORCE_PUSH,
    "closed": "echo closed > closed.txt",
    "closedtool": "echo closed > closed.txt",
    "ask": "git push origin main; echo ran > pushed.txt",
    "managed": FORCE_PUSH,
    "fleetdeny": fleet.DENIED,
    "fleetallow": fleet.ALLOWED,
}
POLICY_HOOK = """
import json, sys
event = json.load(sys.stdin)
name, out = event["hook_event_name"], {}
command = (event.get("tool_input") or {}).get("command", "")
if name == "PreToolUse" and command.startswith("echo rewrite-me"):
    out = {"hookSpecificOutput": {"hookEventName": name, "permissionDecision": "allow",
           "updatedInput": {"command": "echo rewritten > rewritten.txt"}}}
elif name in ("PreToolUse", "PostToolUse") and command.startswith("echo context-me"):
    out = {"systemMessage": "HOOKBUS-NOTE",
           "hookSpecificOutput": {"hookEventName": name, "additionalContext": f"HOOKBUS-{name}-CONTEXT"}}
elif name == "UserPromptSubmit" and "SCENARIO=context" in event.get("prompt", ""):
    out = {"hookSpecificOutput": {"hookEventName": name, "additionalContext": "HOOKBUS-PROMPT-CONTEXT"}}
elif name == "Stop" and not event.get("stop_hook_active") and "STOP-SCENARIO" in (
        event.get("last_assistant_message") or ""):
    out = {"decision": "block", "reason": "HOOKBUS-KEEP-GOING"}
print(json.dumps(out))
"""


def script(request: dict[str, Any]) -> Reply:
    """The fake model: the scenario's command first, then "done" (the stop scenario only talks)."""
    found = re.search(r"SCENARIO=(\w+)", "\n".join(messages(request, "user")))
    scenario = found.group(1) if found else ""
    if scenario == "stop":
        kept_going = any("HOOKBUS-KEEP-GOING" in m for m in messages(request, "user"))
        return text("continued after the hook" if kept_going else "STOP-SCENARIO finished")
    if last_is_tool_output(request) or scenario not in COMMANDS:
        return text("done")
    return shell(COMMANDS[scenario])


@dataclass
class Setup:
    ns: LoopbackNetns
    up: UpProcess
    fake: FakeResponses
    codex: str
    root: Path
    homes: dict[str, Path]  # native, open, closed, closedtool, managed
    gateway_url: str


def codex_binary() -> str:
    found = sorted(pinned("codex").glob("node_modules/@openai/codex-linux-x64/vendor/*/bin/codex"))
    if not found:
        missing("the pinned @openai/codex has no linux-x64 binary")
    return str(found[0])


def codex_config(port: int) -> str:
    return textwrap.dedent(
        f"""\
        model = "{MODEL}"
        model_provider = "fake"
        check_for_update_on_startup = false
        web_search = "disabled"

        [model_providers.fake]
        name = "fake"
        base_url = "http://127.0.0.1:{port}/v1"
        env_key = "FAKE_KEY"
        wire_api = "responses"

        [analytics]
        enabled = false

        [feedback]
        enabled = false
        """
    )


def write_policy(root: Path) -> Path:
    hook = root / "policy_hook.py"
    hook.write_text(POLICY_HOOK)
    command = {"type": "command", "command": f"{sys.executable} {hook}", "timeout": 10}
    policy = {
        "hooks": {
            "PreToolUse": [
                *fleet.policy()["hooks"]["PreToolUse"],  # the rules every agent's test holds its CLI to
                {
                    "matcher": "Bash",
                    "hooks": [
                        {"type": "rule", "reason": "hookbus: no force pushes", "deny": ["Bash(git push --force *)"]}
                    ],
                },
                {
                    "matcher": "Write|Edit",
                    "hooks": [
                        {"type": "rule", "reason": "hookbus: protected/ is read-only", "deny": ["Edit(protected/**)"]}
                    ],
                },
                {
                    "matcher": "Bash",
                    "hooks": [{"type": "rule", "reason": "hookbus: pushes need a review", "ask": ["Bash(git push *)"]}],
                },
                {
                    "matcher": "Bash",
                    "hooks": [{"type": "rule", "reason": "hookbus: fine", "allow": ["Bash(echo allowed *)"]}],
                },
                {"matcher": "Bash", "hooks": [command]},
            ],
            "PostToolUse": [{"matcher": "Bash", "hooks": [command]}],
            "UserPromptSubmit": [{"hooks": [command]}],
            "Stop": [{"hooks": [command]}],
        }
    }
    path = root / "policy.yaml"
    path.write_text(json.dumps(policy, indent=2))  # JSON is YAML
    return path


def install(setup_ns: LoopbackNetns, home: Path, url: str, *flags: str) -> Completed:
    """``hookbus install codex --scope user`` for ``home``, run inside the namespace."""
    env = base_env(home.parent / "user", CODEX_HOME=str(home), HOOKBUS_TOKEN=TOKEN)
    argv = [sys.executable, "-m", "hookbus", "install", "codex", "--scope", "user", "--url", url, *flags]
    done = setup_ns.run(argv, env=env, cwd=home, timeout_s=60)
    assert done.returncode == 0, done.stderr
    return done


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    codex = codex_binary()
    root = tmp_path_factory.mktemp("codex")
    env = {"HOOKBUS_TOKENS": "acme:tok-acme"}
    fake = FakeResponses(script)
    with loopback_netns() as ns, running_up(root, write_policy(root), env) as up:
        with serve_http(ns.listen(), fake.handler()) as port:
            gateway_url = f"http://127.0.0.1:{ns.forward(up.port)}"
            homes = {name: root / f"codex-{name}" for name in ("native", "open", "closed", "closedtool", "managed")}
            for home in homes.values():
                home.mkdir()
                (home / "config.toml").write_text(codex_config(port))
            yield Setup(ns, up, fake, codex, root, homes, gateway_url)


@pytest.fixture(scope="module")
def installed(setup: Setup) -> dict[str, Completed]:
    """The open and the fail-closed Codex homes, each configured by ``hookbus install codex``."""
    return {
        "open": install(setup.ns, setup.homes["open"], setup.gateway_url),
        "closed": install(setup.ns, setup.homes["closed"], setup.gateway_url, "--fail-closed"),
        "closedtool": install(
            setup.ns, setup.homes["closedtool"], setup.gateway_url, "--fail-closed", "--events", "PreToolUse"
        ),
    }


@dataclass
class Run:
    done: Completed
    requests: list[dict[str, Any]]
    work: Path

    def tool_outputs(self) -> list[str]:
        return [output for request in self.requests for output in outputs_of(request)]

    def hook_statuses(self) -> list[str]:
        """Codex's ``hook: EVENT STATUS`` lines (its human output on stderr)."""
        return re.findall(r"^hook: (\w+ (?:Completed|Blocked|Failed))$", self.done.stderr, re.MULTILINE)

    def said(self, role: str) -> str:
        return "\n".join(m for request in self.requests for m in messages(request, role))


def run_codex(setup: Setup, scenario: str, home: str = "open", token: str = TOKEN, *, managed: bool = False) -> Run:
    """One ``codex exec`` of ``scenario`` in a fresh work folder; what it sent the model.

    ``managed``: instead of trusting the user's hooks, first ``hookbus install codex --scope
    managed`` into ``/etc/codex/requirements.toml``, on an overlay of ``/etc`` in a private mount
    namespace (the host's ``/etc`` is never written), and run Codex without the trust flag.
    """
    work = setup.root / f"work-{scenario}"
    work.mkdir()
    env = base_env(setup.root / "user", CODEX_HOME=str(setup.homes[home]), FAKE_KEY="fake", HOOKBUS_TOKEN=token)
    before = len(setup.fake.requests)
    trust = [] if managed else ["--dangerously-bypass-hook-trust"]
    argv = [setup.codex, "exec", "--skip-git-repo-check", "--dangerously-bypass-approvals-and-sandbox", *trust]
    argv += ["-C", str(work), f"SCENARIO={scenario}: do the scripted step"]
    if managed:
        upper, scratch = setup.root / "etc-upper", setup.root / "etc-work"
        upper.mkdir()
        scratch.mkdir()
        installer = [sys.executable, "-m", "hookbus", "install", "codex", "--scope", "managed"]
        script = (
            f"mount -t overlay overlay -o lowerdir=/etc,upperdir={upper},workdir={scratch} /etc"
            f" && {shlex.join([*installer, '--url', setup.gateway_url])} && exec {shlex.join(argv)}"
        )
        argv = ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c", script]
    done = setup.ns.run(argv, env=env, cwd=work, timeout_s=90)
    if managed and done.returncode != 0 and "mount" in done.stderr:
        missing(f"cannot overlay /etc in a private mount namespace: {done.stderr.strip()[-300:]}")
    assert done.returncode == 0, done.stderr[-3000:]
    run = Run(done, setup.fake.requests[before:], work)
    # Codex accepted every answer: a reply it rejects is a Failed hook, and the tool runs.
    assert run.hook_statuses() and not [s for s in run.hook_statuses() if s.endswith("Failed")], done.stderr
    return run


def test_a_native_hook_fires_in_this_headless_setup(setup: Setup) -> None:
    hook = setup.root / "native_deny.sh"
    hook.write_text(
        "#!/bin/sh\ncat >/dev/null\n"
        'echo \'{"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"deny",'
        '"permissionDecisionReason":"NATIVE-DENY"}}\'\n'
    )
    hook.chmod(0o755)
    native = {"hooks": {"PreToolUse": [{"hooks": [{"type": "command", "command": str(hook), "timeout": 5}]}]}}
    (setup.homes["native"] / "hooks.json").write_text(json.dumps(native))
    run = run_codex(setup, "native", home="native")
    assert not (run.work / "native.txt").exists()
    assert "Command blocked by PreToolUse hook: NATIVE-DENY" in "\n".join(run.tool_outputs())


def test_the_installer_configures_codex_and_its_check_reaches_the_gateway(installed: dict[str, Completed]) -> None:
    for done in installed.values():
        assert "hookbus: check: " in done.stdout, done.stdout + done.stderr
        assert "--dangerously-bypass-hook-trust" in done.stderr  # the trust warning


def test_a_central_deny_stops_the_command_and_the_model_gets_the_reason(
    setup: Setup, installed: dict[str, Completed]
) -> None:
    run = run_codex(setup, "deny")
    assert not (run.work / "pushed.txt").exists()
    assert any(
        o.startswith("Command blocked by PreToolUse hook: hookbus: no force pushes") for o in run.tool_outputs()
    ), run.tool_outputs()
    record = decision_record(setup, tool_use_command=FORCE_PUSH)
    meta, hook_input = record
    assert meta["ev"] == "PreToolUse" and meta["tool"] == "Bash" and meta["dec"] == "deny"
    assert meta["ag"] == "codex"
    assert hook_input["agent_tool_name"] == "Bash" and hook_input["tool_name"] == "Bash"


def test_an_allow_lets_the_command_run(setup: Setup, installed: dict[str, Completed]) -> None:
    run = run_codex(setup, "allow")
    assert (run.work / "allowed.txt").read_text() == "allowed\n"
    assert any("exited with code 0" in o for o in run.tool_outputs()), run.tool_outputs()
    assert "PreToolUse Completed" in run.hook_statuses()  # the allow reached Codex as no decision, not Failed
    meta, _ = decision_record(setup, tool_use_command=COMMANDS["allow"])
    assert meta["dec"] == "allow"


def test_a_rewrite_runs_the_new_command(setup: Setup, installed: dict[str, Completed]) -> None:
    run = run_codex(setup, "rewrite")
    assert (run.work / "rewritten.txt").read_text() == "rewritten\n"
    assert not (run.work / "original.txt").exists()


def test_added_context_reaches_the_model(setup: Setup, installed: dict[str, Completed]) -> None:
    run = run_codex(setup, "context")
    assert (run.work / "context.txt").exists()
    developer = run.said("developer")
    assert "HOOKBUS-PROMPT-CONTEXT" in developer
    assert "HOOKBUS-PreToolUse-CONTEXT" in developer and "HOOKBUS-PostToolUse-CONTEXT" in developer


def test_a_stop_block_keeps_codex_working(setup: Setup, installed: dict[str, Completed]) -> None:
    run = run_codex(setup, "stop")
    assert len(run.requests) == 2
    assert "HOOKBUS-KEEP-GOING" in "\n".join(messages(run.requests[1], "user"))
    assert "continued after the hook" in run.done.stdout


def test_a_deny_on_any_file_of_a_patch_stops_the_whole_patch(setup: Setup, installed: dict[str, Completed]) -> None:
    run = run_codex(setup, "patch")
    assert not (run.work / "ok.txt").exists() and not (run.work / "protected").exists()
    assert any("hookbus: protected/ is read-only" in o for o in run.tool_outputs()), run.tool_outputs()
    meta, hook_input = decision_record(setup, tool_use_command=COMMANDS["patch"])
    assert meta["tool"] == "Write" and meta["dec"] == "deny"
    assert hook_input["agent_tool_name"] == "Bash"
    assert hook_input["tool_input"]["file_paths"] == [str(run.work / "ok.txt"), str(run.work / "protected/secret.txt")]


def test_a_wrong_token_fails_open(setup: Setup, installed: dict[str, Completed]) -> None:
    run = run_codex(setup, "open", token="wrong")
    assert (run.work / "pushed.txt").read_text() == "ran\n"  # the force push rule could not be applied


def test_a_wrong_token_blocks_with_fail_closed(setup: Setup, installed: dict[str, Completed]) -> None:
    run = run_codex(setup, "closed", home="closed", token="wrong")
    assert not (run.work / "closed.txt").exists()
    assert run.requests == []  # UserPromptSubmit failed closed: the prompt never reached the model
    assert "hook: UserPromptSubmit Blocked" in run.done.stderr
    tool = run_codex(setup, "closedtool", home="closedtool", token="wrong")
    assert not (tool.work / "closed.txt").exists()
    blocked = [o for o in tool.tool_outputs() if o.startswith("Command blocked by PreToolUse hook: hookbus: gateway")]
    assert blocked and "401" in blocked[0] and "(failing closed)" in blocked[0], tool.tool_outputs()


def test_ask_becomes_a_deny_that_says_codex_cannot_ask(setup: Setup, installed: dict[str, Completed]) -> None:
    run = run_codex(setup, "ask")
    assert not (run.work / "pushed.txt").exists()
    blocked = [o for o in run.tool_outputs() if o.startswith("Command blocked by PreToolUse hook: hookbus: pushes")]
    assert blocked and "which Codex cannot do: denied instead" in blocked[0], run.tool_outputs()


def test_managed_hooks_run_without_any_trust(setup: Setup) -> None:
    run = run_codex(setup, "managed", home="managed", managed=True)
    assert "hookbus: check: " in run.done.stdout
    written = (setup.root / "etc-upper" / "codex" / "requirements.toml").read_text()
    assert "[[hooks.PreToolUse.hooks]]" in written and "--agent codex" in written
    assert not (run.work / "pushed.txt").exists()
    assert any(o.startswith("Command blocked by PreToolUse hook: hookbus: no force pushes") for o in run.tool_outputs())


def test_the_fleet_policy_denies_and_allows_the_same_commands_as_for_every_agent(
    setup: Setup, installed: dict[str, Completed]
) -> None:
    denied = run_codex(setup, "fleetdeny")
    assert not (denied.work / "forbidden.txt").exists()
    assert any(fleet.REASON in o for o in denied.tool_outputs()), denied.tool_outputs()
    allowed = run_codex(setup, "fleetallow")
    assert (allowed.work / "allowed.txt").exists()
    meta, hook_input = decision_record(setup, tool_use_command=fleet.DENIED)
    assert (meta["ag"], meta["tool"], meta["dec"], hook_input["agent_tool_name"]) == ("codex", "Bash", "deny", "Bash")


def decision_record(setup: Setup, *, tool_use_command: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The decision-log record (its metadata and hook input) of the PreToolUse that ran ``command``."""
    keys = Keyspace()
    found: list[tuple[dict[str, Any], dict[str, Any]]] = []
    with redis_sync.Redis.from_url(setup.up.redis_url()) as redis:

        def recorded() -> bool:
            found.clear()
            for _, fields in redis.xrange(keys.decision_log(0)):
                meta, hook_input = orjson.loads(fields[b"r"]), orjson.loads(fields[b"in"])
                if meta["ev"] == "PreToolUse" and hook_input.get("tool_input", {}).get("command") == tool_use_command:
                    found.append((meta, hook_input))
            return bool(found)

        wait_for(recorded, timeout_s=30, interval_s=0.1)
    return found[-1]
