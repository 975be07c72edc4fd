"""GitHub Copilot CLI, for real: the pinned ``copilot`` obeys a central hookbus policy.

The CLI runs headless (``copilot -p``) inside a loopback-only network namespace, with its
model a scripted fake Anthropic Messages API on a socket inside the namespace
(``COPILOT_PROVIDER_TYPE=anthropic``, ``COPILOT_OFFLINE=true``), and its hooks written by
``hookbus install copilot`` itself, pointed at a real ``hookbus up`` reached through a relay.
One ``hookbus up``, one namespace and one fake model serve the whole module; each scenario is
one CLI run, checked by what the fake model was sent back and what the run left on disk.

The first test proves this headless setup runs hooks at all (a local hook with no hookbus
denies), so no later test can pass because hooks silently never ran.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
import redis as redis_sync
import yaml

from bus.dialects.base import AGENT_TOOL_NAME
from bus.redis.keys import Keyspace
from bus.stream.protocol import LogRecord
from tests.agents import fleet
from tests.agents.fake_anthropic import (
    MODEL,
    FakeAnthropic,
    Reply,
    one_tool_call,
    text,
    tool_calls,
    user_text,
)
from tests.agents.harness import LoopbackNetns, base_env, cache_dir, loopback_netns, pinned, serve_http
from tests.ci import missing
from tests.conftest import wait_for
from tests.up import UpProcess, running_up

pytestmark = pytest.mark.system

TOKEN = "tok-acme"
REASON = "hookbus central policy"
POLICY = """
hooks:
  PreToolUse:
    - matcher: "Bash|Write"
      hooks:
        - type: rule
          reason: "hookbus central policy"
          deny:
            - "Bash(git push --force *)"
            - "Bash(touch forbidden*)"
            - "Write(blocked/**)"
          ask:
            - "Bash(touch ask-me*)"
          allow:
            - "Bash(touch approved*)"
    - matcher: Bash
      hooks:
        - {type: function, function: "copilot_policy:rewrite"}
    - matcher: "mcp__memo__.*"
      hooks:
        - type: rule
          reason: "hookbus central policy"
          deny: ["mcp__memo__forget"]
  PostToolUse:
    - matcher: Bash
      hooks:
        - {type: function, function: "copilot_policy:hide_output"}
  PermissionRequest:
    - matcher: Bash
      hooks:
        - type: rule
          reason: "hookbus permission policy"
          deny: ["Bash(touch perm-denied*)"]
  UserPromptSubmit:
    - hooks:
        - {type: function, function: "copilot_policy:prompt_context"}
  Stop:
    - hooks:
        - {type: function, function: "copilot_policy:keep_going"}
"""
FUNCTIONS = '''
"""Handlers for the Copilot CLI test: each acts only on its scenario's marker."""

from pathlib import Path


async def rewrite(hook_input):
    if (hook_input.tool_input or {}).get("command") == "touch rewrite-me.txt":
        rewritten = {"command": "touch rewritten.txt", "description": "rewritten by hookbus"}
        return {"hookSpecificOutput": {"hookEventName": "PreToolUse", "updatedInput": rewritten}}
    return None


async def hide_output(hook_input):
    if "SECRET-VALUE" in str(hook_input.tool_response):
        return {"hookSpecificOutput": {"hookEventName": "PostToolUse", "updatedToolOutput": "[hidden by hookbus]"}}
    return None


async def prompt_context(hook_input):
    if "CONTEXT-PLEASE" in (hook_input.prompt or ""):
        return {"hookSpecificOutput": {"hookEventName": "UserPromptSubmit", "additionalContext": "HOOKBUS-CONTEXT-7"}}
    return None


async def keep_going(hook_input):
    if Path(hook_input.cwd or "/nonexistent", "keep-going.flag").exists() and not hook_input.stop_hook_active:
        return {"decision": "block", "reason": "HOOKBUS-KEEP-GOING: run the tests first"}
    return None
'''

#: A stdio MCP server named ``memo`` with the tools ``remember`` and ``forget``.
MCP_SERVER = """
import json, sys

schema = {"type": "object", "properties": {"note": {"type": "string"}}}
for line in sys.stdin:
    message = json.loads(line)
    method, params = message.get("method"), message.get("params") or {}
    result = {
        "initialize": {"protocolVersion": params.get("protocolVersion"), "capabilities": {"tools": {}},
                       "serverInfo": {"name": "memo", "version": "1"}},
        "tools/list": {"tools": [{"name": n, "description": n, "inputSchema": schema} for n in ("remember", "forget")]},
        "tools/call": {"content": [{"type": "text", "text": f"memo {params.get('name')} done"}]},
    }.get(method, {})
    if message.get("id") is not None:
        print(json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": result}), flush=True)
"""


@dataclasses.dataclass
class Copilot:
    """Everything a scenario needs: the namespace, the fake model, the platform, the CLI."""

    ns: LoopbackNetns
    fake: FakeAnthropic
    up: UpProcess
    model_url: str
    gateway_url: str
    binary: Path
    root: Path

    def home(self, name: str) -> Path:
        """A ``COPILOT_HOME`` of its own for one kind of configuration."""
        found = self.root / "homes" / name
        (found / "hooks").mkdir(parents=True, exist_ok=True)
        return found

    def env(self, home: Path, token: str = TOKEN) -> dict[str, str]:
        return base_env(
            self.root / "home",
            COPILOT_HOME=str(home),
            COPILOT_OFFLINE="true",
            COPILOT_AUTO_UPDATE="false",
            COPILOT_PROVIDER_TYPE="anthropic",
            COPILOT_PROVIDER_BASE_URL=self.model_url,
            COPILOT_PROVIDER_API_KEY="sk-fake-not-a-key",
            COPILOT_MODEL=MODEL,
            COPILOT_PKG_CACHE_HOME=str(cache_dir() / "copilot-pkg"),
            COPILOT_HOOK_ALLOW_LOCALHOST="1",
            HOOKBUS_TOKEN=token,
        )

    def install(self, home: Path, *flags: str, cwd: Path | None = None) -> str:
        """``hookbus install copilot`` run inside the namespace (its check reaches the gateway); its stdout."""
        done = self.ns.run(
            [sys.executable, "-m", "hookbus", "install", "copilot", "--url", self.gateway_url, *flags],
            env={**self.env(home), "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
            cwd=cwd or self.root,
            timeout_s=60,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout + done.stderr

    def run(
        self,
        home: Path,
        work: Path,
        prompt: str = "do the thing",
        token: str = TOKEN,
        extra: tuple[str, ...] = ("--allow-all-tools",),
    ) -> str:
        """One headless run in ``work`` (``extra``: more flags; by default Copilot asks for no permission)."""
        argv = [str(self.binary), "-p", prompt, "-s", "--output-format", "json"]
        argv += ["--no-auto-update", "--disable-client-telemetry", "--no-ask-user", "--disable-builtin-mcps", *extra]
        done = self.ns.run(argv, env=self.env(home, token), cwd=work, timeout_s=90)
        results = [json.loads(line) for line in done.stdout.splitlines() if line.startswith('{"type":"result"')]
        assert results, f"no result from copilot (exit {done.returncode}): {done.stdout[-2000:]} {done.stderr[-2000:]}"
        session: str = results[-1]["sessionId"]
        return session


def records_of(copilot: Copilot, session: str, *events: str) -> list[LogRecord]:
    """The decision-log records of ``session``'s ``events``, oldest first."""
    with redis_sync.Redis.from_url(copilot.up.redis_url()) as redis:
        found = [LogRecord.decode(f) for log in Keyspace().decision_logs for _, f in redis.xrange(log)]
    return sorted((r for r in found if r.session_id == session and r.event in events), key=lambda r: r.received_ms)


@pytest.fixture(scope="module")
def copilot(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Copilot]:
    binary = pinned("copilot") / "node_modules" / "@github" / "copilot-linux-x64" / "copilot"
    if not binary.is_file():
        missing(f"the pinned Copilot CLI has no native binary at {binary}")
    root = tmp_path_factory.mktemp("copilot")
    (root / "home").mkdir()
    functions = root / "functions"
    functions.mkdir()
    (functions / "copilot_policy.py").write_text(textwrap.dedent(FUNCTIONS))
    policy = root / "policy.json"
    document = yaml.safe_load(POLICY)
    document["hooks"]["PreToolUse"] += fleet.policy()["hooks"]["PreToolUse"]  # the rules every agent obeys
    policy.write_text(json.dumps(document))
    python_path = os.pathsep.join(p for p in (str(functions), os.environ.get("PYTHONPATH", "")) if p)
    env = {"HOOKBUS_TOKENS": f"acme:{TOKEN}", "PYTHONPATH": python_path}
    fake = FakeAnthropic()
    with loopback_netns() as ns, running_up(root, policy, env) as up:
        with serve_http(ns.listen(), fake.handler()) as model_port:
            gateway_port = ns.forward(up.port)
            yield Copilot(
                ns, fake, up, f"http://127.0.0.1:{model_port}", f"http://127.0.0.1:{gateway_port}", binary, root
            )


@pytest.fixture(scope="module")
def http_home(copilot: Copilot) -> Path:
    """A ``COPILOT_HOME`` with hookbus's http hooks, installed by ``hookbus install copilot --scope user --http``."""
    home = copilot.home("http")
    out = copilot.install(home, "--scope", "user", "--http")
    assert "token accepted as tenant acme" in out  # the installer's check went through the relay
    assert "COPILOT_HOOK_ALLOW_LOCALHOST=1" in out
    config = json.loads((home / "hooks" / "hookbus.json").read_text())
    assert config["hooks"]["PreToolUse"][0]["type"] == "http"
    return home


@pytest.fixture
def work(tmp_path: Path) -> Path:
    found = tmp_path / "work"
    found.mkdir()
    return found


def bash(command: str) -> dict[str, Any]:
    return {"command": command, "description": "scripted by the test"}


@pytest.mark.timeout(120)
def test_a_native_hook_denies_so_headless_copilot_runs_hooks(copilot: Copilot, work: Path) -> None:
    home = copilot.home("native")
    deny = {"permissionDecision": "deny", "permissionDecisionReason": "NATIVE-DENY"}
    hook = {"type": "command", "bash": f"cat >/dev/null; echo '{json.dumps(deny)}'", "timeoutSec": 10}
    (home / "hooks" / "native.json").write_text(json.dumps({"version": 1, "hooks": {"PreToolUse": [hook]}}))
    copilot.fake.reset(one_tool_call("bash", bash("touch native.txt")))
    copilot.run(home, work)
    assert copilot.fake.tool_result() == "Denied by preToolUse hook: NATIVE-DENY"
    assert not (work / "native.txt").exists()


@pytest.mark.timeout(120)
def test_b_central_deny_reaches_the_model_and_the_decision_log(copilot: Copilot, http_home: Path, work: Path) -> None:
    copilot.fake.reset(one_tool_call("bash", bash("git push --force origin main && touch pushed.txt")))
    session = copilot.run(http_home, work)
    seen = copilot.fake.tool_result()
    assert seen.startswith("Denied by preToolUse hook: ") and REASON in seen
    assert "Bash(git push --force *)" in seen
    assert not (work / "pushed.txt").exists()
    (record,) = wait_for(lambda: records_of(copilot, session, "PreToolUse"), timeout_s=30, interval_s=0.1)
    assert (record.agent, record.tool_name, record.tenant, record.decision) == ("copilot", "Bash", "acme", "deny")
    logged = orjson.loads(record.payload)
    assert logged[AGENT_TOOL_NAME] == "bash" and logged["tool_input"]["command"].startswith("git push --force")
    assert REASON in record.reason


@pytest.mark.timeout(120)
def test_c_an_allowed_command_runs_and_every_event_is_recorded(copilot: Copilot, http_home: Path, work: Path) -> None:
    copilot.fake.reset(one_tool_call("bash", bash("touch plain.txt")))
    session = copilot.run(http_home, work)
    assert (work / "plain.txt").exists()
    assert "Denied" not in copilot.fake.tool_result()
    events = "SessionStart UserPromptSubmit PreToolUse PermissionRequest PostToolUse Stop SessionEnd".split()
    found = wait_for(
        lambda: records_of(copilot, session, *events) if records_of(copilot, session, "SessionEnd") else []
    )
    assert {r.event for r in found} == set(events) and {r.agent for r in found} == {"copilot"}
    (permission,) = [r for r in found if r.event == "PermissionRequest"]  # it arrives camelCase
    assert (
        permission.tool_name == "Bash" and orjson.loads(permission.payload)["agent_event_name"] == "permissionRequest"
    )


@pytest.mark.timeout(120)
def test_the_fleet_policy_allow_runs_the_command_and_skips_copilots_prompt(copilot: Copilot, http_home: Path) -> None:
    (work := copilot.root / "fleet-allow").mkdir()
    copilot.fake.reset(one_tool_call("bash", bash(fleet.ALLOWED)))
    session = copilot.run(http_home, work)
    assert (work / "allowed.txt").exists()
    found = wait_for(lambda: records_of(copilot, session, "PreToolUse", "PermissionRequest"), timeout_s=30)
    assert [(r.event, r.decision) for r in found] == [("PreToolUse", "allow")]  # no PermissionRequest after it


@pytest.mark.timeout(120)
def test_a_write_policy_applies_to_copilots_create_tool(copilot: Copilot, http_home: Path, work: Path) -> None:
    target = work / "blocked" / "secret.txt"
    copilot.fake.reset(one_tool_call("create", {"path": str(target), "file_text": "x"}))
    copilot.run(http_home, work)
    seen = copilot.fake.tool_result()
    assert seen.startswith("Denied by preToolUse hook: ") and "Write(blocked/**)" in seen
    assert not target.exists()


@pytest.mark.timeout(120)
def test_an_mcp_policy_applies_to_copilots_mcp_tools(copilot: Copilot, http_home: Path, work: Path) -> None:
    server = work.parent / "memo_server.py"
    server.write_text(MCP_SERVER)
    config = {
        "mcpServers": {"memo": {"type": "local", "command": sys.executable, "args": [str(server)], "tools": ["*"]}}
    }

    copilot.fake.reset(tool_calls(("memo-forget", {"note": "x"}), ("memo-remember", {"note": "y"})))
    copilot.run(http_home, work, extra=("--allow-all-tools", "--additional-mcp-config", json.dumps(config)))
    assert "memo-forget" in [t["name"] for t in copilot.fake.requests[0]["tools"]]
    forget = copilot.fake.tool_result("toolu_fake_1")
    assert forget.startswith("Denied by preToolUse hook: ") and "mcp__memo__forget" in forget
    assert copilot.fake.tool_result("toolu_fake_2") == "memo remember done"


@pytest.mark.timeout(120)
def test_allow_ask_and_permission_request_without_allow_all_tools(
    copilot: Copilot, http_home: Path, work: Path
) -> None:
    commands = ("touch approved.txt", "touch ask-me.txt", "touch perm-denied.txt", "touch unjudged.txt")
    copilot.fake.reset(tool_calls(*(("bash", bash(command)) for command in commands)))
    copilot.run(http_home, work, extra=())  # Copilot would ask for every shell command, and cannot
    assert (work / "approved.txt").exists()  # hookbus's allow skipped Copilot's own prompt
    # An ask Copilot cannot show (-p) is its own deny, never a run.
    asked = copilot.fake.tool_result("toolu_fake_2")
    assert asked.startswith("Denied by preToolUse hook (unable to ask user for confirmation): ") and REASON in asked
    # PermissionRequest's decision object went back as Copilot's top-level behavior/message.
    denied = copilot.fake.tool_result("toolu_fake_3")
    assert (
        denied.startswith("Permission denied by a PermissionRequest hook: ") and "hookbus permission policy" in denied
    )
    assert copilot.fake.tool_result("toolu_fake_4").startswith("Permission denied because no interactive user")
    assert sorted(p.name for p in work.iterdir()) == ["approved.txt"]


@pytest.mark.timeout(120)
def test_d_rewritten_input_is_what_runs(copilot: Copilot, http_home: Path, work: Path) -> None:
    copilot.fake.reset(one_tool_call("bash", bash("touch rewrite-me.txt")))
    copilot.run(http_home, work)
    assert (work / "rewritten.txt").exists() and not (work / "rewrite-me.txt").exists()


@pytest.mark.timeout(120)
def test_d_a_replaced_tool_output_is_what_the_model_reads(copilot: Copilot, http_home: Path, work: Path) -> None:
    copilot.fake.reset(one_tool_call("bash", bash("echo SECRET-VALUE")))
    copilot.run(http_home, work)
    assert copilot.fake.tool_result() == "[hidden by hookbus]"


@pytest.mark.timeout(120)
def test_d_added_context_reaches_the_model(copilot: Copilot, http_home: Path, work: Path) -> None:
    copilot.fake.reset(lambda request: text("Noted."))
    copilot.run(http_home, work, "CONTEXT-PLEASE: say hi")
    first = user_text(copilot.fake.requests[0])
    assert "HOOKBUS-CONTEXT-7" in first and "CONTEXT-PLEASE" in first


@pytest.mark.timeout(120)
def test_d_a_stop_block_keeps_copilot_working(copilot: Copilot, http_home: Path, work: Path) -> None:
    (work / "keep-going.flag").write_text("")

    def script(request: dict[str, Any]) -> Reply:
        return text("Tests run." if "HOOKBUS-KEEP-GOING" in user_text(request) else "Finished, I think.")

    copilot.fake.reset(script)
    copilot.run(http_home, work)
    assert len(copilot.fake.requests) == 2  # the block sent the model back to work, once
    assert "HOOKBUS-KEEP-GOING: run the tests first" in user_text(copilot.fake.requests[1])
    assert "HOOKBUS-KEEP-GOING" not in user_text(copilot.fake.requests[0])


@pytest.mark.timeout(120)
def test_e_a_refused_http_hook_is_a_deny(copilot: Copilot, http_home: Path, work: Path) -> None:
    # Copilot counts an http PreToolUse hook that gets an error status (here the gateway's 401)
    # as a hook error, and a hook error on PreToolUse as a deny.
    copilot.fake.reset(one_tool_call("bash", bash("touch harmless.txt")))
    copilot.run(http_home, work, token="wrong")
    assert not (work / "harmless.txt").exists()
    assert copilot.fake.tool_result().startswith("Denied by preToolUse hook from ")
    assert copilot.fake.tool_result().endswith("(hook errored)")


@pytest.mark.timeout(120)
def test_e_a_wrong_token_fails_open_through_the_shim(copilot: Copilot, work: Path) -> None:
    home = copilot.home("shim-open")
    out = copilot.install(home, "--scope", "user", "--shim", "--events", "PreToolUse")
    assert "command hooks" in out and "COPILOT_HOOK_ALLOW_LOCALHOST" not in out
    copilot.fake.reset(one_tool_call("bash", bash("touch forbidden.txt")))
    copilot.run(home, work, token="wrong")
    assert (work / "forbidden.txt").exists(), copilot.fake.tool_result()  # refused token: Copilot went on


@pytest.mark.timeout(120)
def test_e_fail_closed_blocks_with_a_wrong_token_and_decides_with_the_right_one(copilot: Copilot, work: Path) -> None:
    home = copilot.home("shim-closed")
    out = copilot.install(home, "--scope", "user", "--fail-closed", "--events", "PreToolUse")
    assert "command hooks" in out and "token accepted as tenant acme" in out
    entry = json.loads((home / "hooks" / "hookbus.json").read_text())["hooks"]["PreToolUse"][0]
    assert entry["type"] == "command" and "--fail-closed" in entry["bash"]
    copilot.fake.reset(one_tool_call("bash", bash("touch harmless.txt")))
    copilot.run(home, work, token="wrong")
    assert not (work / "harmless.txt").exists()
    assert copilot.fake.tool_result().startswith("Denied by preToolUse hook")
    copilot.fake.reset(one_tool_call("bash", bash("touch forbidden.txt")))
    copilot.run(home, work)
    assert REASON in copilot.fake.tool_result() and not (work / "forbidden.txt").exists()
    copilot.fake.reset(one_tool_call("bash", bash("touch fine.txt")))
    copilot.run(home, work)
    assert (work / "fine.txt").exists()  # with the right token an allowed call runs


@pytest.mark.timeout(120)
def test_project_hooks_need_a_trusted_folder_in_prompt_mode(copilot: Copilot, work: Path) -> None:
    home = copilot.home("project")
    out = copilot.install(home, cwd=work)
    assert "only in a trusted folder" in out
    assert (work / ".github" / "hooks" / "hookbus.json").is_file()
    copilot.fake.reset(one_tool_call("bash", bash("touch forbidden-untrusted.txt")))
    copilot.run(home, work)
    assert (work / "forbidden-untrusted.txt").exists()  # the trap the installer warns about
    copilot.fake.reset(one_tool_call("bash", bash("touch forbidden-trusted.txt")))
    copilot.run(home, work, extra=("--allow-all-tools", "--trust-folder"))
    assert REASON in copilot.fake.tool_result() and not (work / "forbidden-trusted.txt").exists()
