"""The compiled policy decides exactly as the policy read one handler and one rule at a time.

The reference here is built only of the per-item functions (:func:`bus.policy.compiled.selected`
per handler, :func:`bus.rules.permissions.rule_matches` per rule in list order, a full merge
of every result) and is compared with the engine, which selects through
:class:`bus.policy.compiled.CompiledPolicy`, matches with the compiled rule lists and skips
the merge when one rule decides. Compared: on the example policy over a realistic corpus, and
on generated policies and tool calls; the caches these use are bounded.
"""

from __future__ import annotations

import asyncio
import random
import sys
from typing import Any

import orjson
import pytest

from bus.hooks import merge
from bus.hooks.results import HandlerResult, Outcome
from bus.policy.compiled import CHOICES_PER_EVENT, compiled, selected
from bus.policy.loading import Policy, load_policy, policy_from_text
from bus.policy.rulelists import compile_lists
from bus.policy.ruleoutput import _ALONE, _decided, _reason_text, rule_output
from bus.policy.schema import RuleHandler
from bus.redis.keys import Keyspace
from bus.rules import bashsplit
from bus.rules.bashsplit import SPLIT_CACHE_SIZE
from bus.rules.limits import using_limits
from bus.rules.permissions import SHELL_TOOLS, parse_rule, rule_matches
from bus.rules.shellread import read_shell
from bus.stream.protocol import Request
from tests.conftest import REPO
from workers.engine.evaluation import Engine
from workers.handlers.runners import default_runners

sys.path.insert(0, str(REPO / "bench"))
import corpus

EVENTS = ("PreToolUse", "PostToolUse", "PostToolUseFailure", "PermissionRequest")


def reference_verdict(handler: RuleHandler, hook_input: dict[str, Any]) -> tuple[str, str] | None:
    tool_name = hook_input.get("tool_name")
    if not isinstance(tool_name, str):
        return None
    tool_input = hook_input.get("tool_input")
    arguments = tool_input if isinstance(tool_input, dict) else {}
    cwd = hook_input.get("cwd") if isinstance(hook_input.get("cwd"), str) else None
    for verdict, texts in (("deny", handler.deny), ("ask", handler.ask), ("allow", handler.allow)):
        for text in texts:
            if rule_matches(parse_rule(text), tool_name, arguments, cwd, kind=verdict):  # type: ignore[arg-type]
                return verdict, text
    return None


def reference_result(handler: RuleHandler, event: str, hook_input: dict[str, Any]) -> HandlerResult:
    found = reference_verdict(handler, hook_input)
    if found is None:
        return HandlerResult(Outcome.OK, output={}, handler_type="rule")
    tool_name, tool_input = hook_input.get("tool_name"), hook_input.get("tool_input")
    command = tool_input.get("command") if tool_name in SHELL_TOOLS and isinstance(tool_input, dict) else None
    why = read_shell(command, tool_name == "PowerShell").unjudged if isinstance(command, str) else None
    return HandlerResult(Outcome.OK, output=rule_output(event, *found, handler.reason, why), handler_type="rule")


def reference_decision(policy: Policy, event: str, hook_input: dict[str, Any]) -> tuple[Any, ...]:
    """Select, run and merge one handler and one rule at a time, always with the full merge."""
    with using_limits(policy.settings.limits):
        results = []
        for entry in policy.entries(event):
            if selected(entry, event, hook_input, "claude-code"):
                assert isinstance(entry.handler, RuleHandler)
                result = reference_result(entry.handler, event, hook_input)
                result.handler_id = entry.handler_id
                results.append(result)
        if all(r.outcome is Outcome.OK and not r.output for r in results):
            merged = merge.MergedDecision({}, "none", None)
        else:
            merged = merge._merge(event, results)
        decided = [r.handler_id for r in results if r.output and merge._merge(event, [r]).decision == merged.decision]
    return merged.output, merged.decision, merged.reason, decided if merged.decision != "none" else []


def engine_decision(engine: Engine, policy: Policy, event: str, hook_input: dict[str, Any]) -> tuple[Any, ...]:
    request = Request(event_id="e", event=event, tenant="default", payload=orjson.dumps(hook_input), received_ms=0)
    evaluation = asyncio.run(engine.evaluate(request, hook_input, policy))
    merged = evaluation.merged
    return merged.output, merged.decision, merged.reason, evaluation.decided_by


def engine_for(policy: Policy) -> Engine:
    return Engine(policy, None, Keyspace(), default_runners(), async_handlers="skip")  # type: ignore[arg-type]


def test_the_example_policy_decides_as_the_reference_on_a_realistic_corpus() -> None:
    policy = load_policy([REPO / "examples" / "policy.yaml"])
    engine = engine_for(policy)
    decisions = set()
    for hook_input in corpus.hook_inputs(3000, seed=7):
        expected = reference_decision(policy, "PreToolUse", hook_input)
        assert engine_decision(engine, policy, "PreToolUse", hook_input) == expected, hook_input
        decisions.add(expected[1])
    assert decisions == {"none", "deny", "ask"}  # the corpus reaches every verdict the pack gives


# -- generated policies and calls -----------------------------------------------------------

SHELL_RULES = [
    "Bash",
    "Bash(*)",
    "Bash(rm -rf *)",
    "Bash(git push *)",
    "Bash(git push *--force*)",
    "Bash(npm run test:*)",
    "Bash(ls)",
    "Bash(ls *)",
    "Bash(cat *.env*)",
    "Bash(*secret*)",
    "Bash(a* b* c* d*)",
    "Bash(sudo *)",
    "Bash(timeout:*)",
    "Bash(description:danger*)",
    "PowerShell(Remove-Item *)",
]
PATH_RULES = [
    "Read",
    "Read(**/.env)",
    "Read(*.pem)",
    "Read(~/.ssh/**)",
    "Read(//etc/**)",
    "Read(secrets/**)",
    "Read(./src/**)",
    "Read(/docs/*.md)",
    "Edit",
    "Edit(src/**)",
    "Edit(**/*.lock)",
    "Write(//tmp/*)",
    "Grep(pattern:TODO*)",
    "Glob(**/node_modules/**)",
    "Read(offset:10)",
]
OTHER_RULES = ["WebFetch(domain:example.com)", "mcp__github", "mcp__github__create_issue", "Agent(explore*)", "*"]
MATCHERS = [None, "*", "Bash", "Read|Edit|Write", "Bash|PowerShell", "Re.*", "mcp__.*", "Grep|Glob", "Edit"]
IFS = [None, None, None, "Bash(git *)", "Read(**/*.py)", "Edit(src/**)", "Write", "Bash(rm *)"]

COMMANDS = [
    "",
    "   ",
    "ls",
    "ls -la",
    "rm -rf /tmp/x",
    "git push --force origin main",
    "git push origin main",
    "git status && rm -rf build",
    "cat .env.local",
    "echo $(cat secret.txt)",
    'echo "unterminated',
    "a1 b2 c3 d4",
    "timeout 30 git push origin x",
    "npm run test",
    "npm run test -- --watch",
    "sudo ls",
    "FOO=1 ls",
    "x=$(ls) && git push",
    "Remove-Item -Recurse C:\\x",
]
PATHS = [
    "/home/dev/project/.env",
    "/home/dev/project/src/a.py",
    "src/b.py",
    "../other/.env",
    "/etc/passwd",
    "/tmp/x",
    "/home/dev/.ssh/id_rsa",
    "C:\\Users\\dev\\project\\x.pem",
    "/home/dev/project/secrets/k.txt",
    "/home/dev/project/docs/a.md",
    "/home/dev/project/yarn.lock",
    "",
]


def random_policy(rng: random.Random) -> str:
    lines = ["hooks:"]
    for event in rng.sample(EVENTS, rng.randint(1, len(EVENTS))):
        lines.append(f"  {event}:")
        for _ in range(rng.randint(1, 3)):
            matcher = rng.choice(MATCHERS)
            lines.append(f"    - matcher: {orjson.dumps(matcher).decode()}" if matcher else "    - hooks:")
            if matcher:
                lines.append("      hooks:")
            for _ in range(rng.randint(1, 3)):
                lines.append("        - type: rule")
                if rng.random() < 0.5:
                    lines.append(f"          reason: {orjson.dumps(rng.choice(['r1', 'r2 x'])).decode()}")
                if (condition := rng.choice(IFS)) is not None:
                    lines.append(f"          if: {orjson.dumps(condition).decode()}")
                pool = SHELL_RULES + PATH_RULES + OTHER_RULES
                for verdict in ("deny", "ask", "allow"):
                    chosen = rng.sample(pool, rng.randint(0, 6))
                    if chosen:
                        lines.append(f"          {verdict}: {orjson.dumps(chosen).decode()}")
    return "\n".join(lines) + "\n"


def random_call(rng: random.Random, event: str) -> dict[str, Any]:
    tool = rng.choice(["Bash", "PowerShell", "Read", "Edit", "Write", "Grep", "Glob", "WebFetch", "mcp__github__x"])
    tool_input: dict[str, Any]
    if tool in SHELL_TOOLS:
        tool_input = {"command": rng.choice(COMMANDS), "description": rng.choice(["danger zone", "safe"])}
    elif tool == "WebFetch":
        tool_input = {"url": rng.choice(["https://api.example.com/x", "https://evil.test/"])}
    elif tool.startswith("mcp__"):
        tool_input = {}
    else:
        tool_input = {"file_path": rng.choice(PATHS), "path": rng.choice(PATHS), "pattern": "TODO x"}
        if tool == "Edit" and rng.random() < 0.5:
            tool_input["file_paths"] = rng.sample(PATHS, 3)
        if tool == "Read" and rng.random() < 0.3:
            tool_input["offset"] = 10
    hook_input: dict[str, Any] = {"session_id": "s", "hook_event_name": event, "tool_name": tool}
    hook_input["tool_input"] = tool_input
    if rng.random() < 0.9:
        hook_input["cwd"] = rng.choice(["/home/dev/project", "/home/dev/project/", "C:\\Users\\dev\\project"])
    return hook_input


@pytest.mark.parametrize("seed", range(40))
def test_generated_policies_decide_as_the_reference(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", "/home/dev")
    rng = random.Random(seed)
    policy = policy_from_text(random_policy(rng))
    engine = engine_for(policy)
    for _ in range(150):
        event = rng.choice(sorted(policy.events()))
        hook_input = random_call(rng, event)
        expected = reference_decision(policy, event, hook_input)
        assert engine_decision(engine, policy, event, hook_input) == expected, (event, hook_input)


@pytest.mark.parametrize(("event", "verdict"), sorted(_ALONE))
def test_a_rule_verdict_merged_alone_is_its_own_output(event: str, verdict: str) -> None:
    # The fast path hands a lone rule verdict back unmerged: only where merging changes nothing.
    for reason in ("why", None):
        output = rule_output(event, verdict, "Bash(x)", reason)
        text = _reason_text(verdict, "Bash(x)", reason, None)
        result = HandlerResult(Outcome.OK, output=output, handler_type="rule", decided=_decided(event, verdict, text))
        assert result.decided is not None
        assert merge.merge_results(event, [result]) == merge._merge(event, [result])


def test_the_rule_named_is_the_first_in_the_list_that_matches() -> None:
    lists = compile_lists(("Edit(**/*.lock)", "Bash(ls *)", "Edit(src/**)", "Bash(*)", "Edit"), (), ())
    edit = {"file_path": "/w/src/a.py", "file_paths": ["/w/src/a.py", "/w/yarn.lock"]}
    assert lists[0].first_match("Edit", edit, "/w") == "Edit(**/*.lock)"  # the second path, the first rule
    assert lists[0].first_match("Edit", {"file_path": "/w/x.txt"}, "/w") == "Edit"
    assert lists[0].first_match("Bash", {"command": "pwd && ls -la"}, "/w") == "Bash(ls *)"
    assert lists[0].first_match("Bash", {"command": ""}, "/w") == "Bash(*)"  # no subcommand at all


# -- bounds -----------------------------------------------------------------------------


def test_the_split_cache_holds_at_most_its_size() -> None:
    lists = compile_lists(("Bash(rm -rf *)",), (), ())
    for i in range(SPLIT_CACHE_SIZE + 300):
        lists[0].first_match("Bash", {"command": f"echo {i} && ls"}, "/w")
    assert bashsplit.split_cache_info().currsize <= SPLIT_CACHE_SIZE
    assert bashsplit.split_cache_info().maxsize == SPLIT_CACHE_SIZE


def test_a_repeated_command_is_split_once() -> None:
    command = f"git status && echo {random.random()}"
    before = bashsplit.split_cache_info()
    for _ in range(5):
        bashsplit.parse_commands(command)
    after = bashsplit.split_cache_info()
    assert (after.misses - before.misses, after.hits - before.hits) == (1, 4)


def test_the_choices_of_an_event_stay_bounded() -> None:
    policy = policy_from_text('hooks:\n  PreToolUse:\n    - matcher: "mcp__.*"\n      hooks:\n        - type: rule\n')
    event = compiled(policy).events["PreToolUse"]
    for i in range(CHOICES_PER_EVENT * 2 + 5):
        chosen = event.select({"tool_name": f"mcp__s{i}__t", "tool_input": {}}, "claude-code")
        assert len(chosen) == 1
    assert len(event._choices) <= CHOICES_PER_EVENT
    long_name = "mcp__" + "x" * 10_000
    event.select({"tool_name": long_name, "tool_input": {}}, "claude-code")
    assert all(key[0] != long_name for key in event._choices)  # long values are never kept


def test_a_policy_is_compiled_when_it_loads() -> None:
    policy = policy_from_text("hooks:\n  PreToolUse:\n    - hooks:\n        - type: rule\n          deny: [Bash]\n")
    from bus.policy.compiled import _COMPILED

    assert policy in _COMPILED
    handler = compiled(policy).events["PreToolUse"].handlers[0]
    assert handler.rules is not None and handler.rules[0].verdict == "deny"


def test_a_rule_that_raises_fails_like_any_handler(monkeypatch: pytest.MonkeyPatch) -> None:
    text = "hooks:\n  PreToolUse:\n    - hooks:\n        - {type: rule, deny: ['Bash(rm *)']}\n"
    policy = policy_from_text(text + "        - {type: rule, failMode: closed, ask: ['Bash(git push *)']}\n")
    engine = engine_for(policy)

    def broken(*args: Any) -> HandlerResult:
        raise RuntimeError("rule exploded")

    monkeypatch.setattr("workers.engine.evaluation.decide_rules", broken)
    request = Request(event_id="e", event="PreToolUse", tenant="default", payload=b"{}", received_ms=0)
    hook_input = {"session_id": "s", "tool_name": "Bash", "tool_input": {"command": "ls"}}
    evaluation = asyncio.run(engine.evaluate(request, hook_input, policy))
    assert [r.outcome for r in evaluation.results] == [Outcome.ERROR, Outcome.ERROR]
    assert evaluation.merged.decision == "deny"  # the failMode: closed one blocks
    assert "rule exploded" in (evaluation.merged.reason or "")
    alone = policy_from_text(text)
    evaluation = asyncio.run(engine_for(alone).evaluate(request, hook_input, alone))
    assert (evaluation.merged.decision, evaluation.fail_open) == ("none", "hook_error")  # fail open, counted
