"""Rule lists: one pass over a command's subcommands whatever the number of rules, with the same
answer as trying each rule in list order (:func:`bus.rules.permissions.rule_matches`)."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from bus.hooks.results import with_note
from bus.policy import rulelists
from bus.policy.rulelists import RuleList, compile_lists
from bus.rules import shellread, shellrules
from bus.rules.paths import agent_home
from bus.rules.permissions import rule_matches

pytestmark = pytest.mark.timeout(60)

DENY = (
    "Bash(git status)",
    "Bash(npm publish *)",
    "Bash(git push *--force*)",
    "Bash(git push *)",
    "Bash(rm -rf *)",
    "Bash(curl * | sh)",
    "Bash(*secret*)",
    "Bash(sudo *)",
    "Bash(timeout)",
    "Bash(dd if=* of=/dev/*)",
    "Bash(git*)",
    "Bash(chmod -R 777 *)",
    "Bash(a * b * c * d)",  # three stars: tried on its own
    "Bash(npm run test:*)",
    "Bash(description:danger*)",
)

COMMANDS = (
    "ls",
    "git status",
    "git push origin main",
    "git push $REMOTE --force",
    "git $SUB --force",
    "$CMD -rf /",
    "`which rm` -rf /",
    "echo $(rm -rf /)",
    "rm -rf $HOME",
    "rm $FLAGS /",
    "timeout 5 $X",
    "timeout 5 git push $x",
    "nohup sudo $x",
    "x=1 npm publish $TAG",
    "curl $URL | sh",
    "cat $F | grep secret",
    "dd if=$IN of=/dev/sda",
    "chmod -R 777 $D; ls",
    "a 1 b 2 c 3 d",
    "npm run test:$x",
    "echo 'unterminated",
    "for f in $(ls); do rm -rf $f; done",
    "${GIT} push",
    "git push && $(echo git) status",
)


def reference(rule_list: RuleList, tool_input: dict[str, Any]) -> str | None:
    """The first rule of the list, in its order, that matches on its own."""
    return next(
        (
            text
            for _, rule, text in rule_list.rules
            if rule_matches(rule, "Bash", tool_input, "/w", kind=rule_list.verdict)
        ),
        None,
    )


@pytest.mark.parametrize("verdict", ["deny", "ask"])
@pytest.mark.parametrize("command", COMMANDS)
def test_the_combined_match_names_the_rule_trying_each_would(command: str, verdict: str) -> None:
    deny, ask = (DENY, ()) if verdict == "deny" else ((), DENY)
    (rule_list,) = compile_lists(deny, ask, ())
    for rules in (rule_list, *(compile_lists(tuple(order), (), ())[0] for order in _orders())):
        tool_input = {"command": command, "description": "x"}
        assert rules.first_match("Bash", tool_input, "/w") == reference(rules, tool_input), command


def _orders() -> list[tuple[str, ...]]:
    """A few other orders of the same rules (the first match depends on it)."""
    return [tuple(reversed(DENY)), DENY[5:] + DENY[:5], tuple(itertools.islice(itertools.cycle(DENY[1::2]), 7))]


def test_a_command_costs_one_pass_whatever_the_number_of_rules(monkeypatch: pytest.MonkeyPatch) -> None:
    rules = (*(f"Bash(tool{i} --flag *)" for i in range(300)), "Bash(rm -rf *)")
    (rule_list,) = compile_lists(rules, (), ())
    command = "a;" * 1000 + "a $x; rm -rf /"  # expansions: the rules used to be tried one by one
    calls = 0
    real = shellrules._reading_matches

    def counted(*args: Any) -> bool:
        nonlocal calls
        calls += 1
        return real(*args)

    monkeypatch.setattr(shellrules, "_reading_matches", counted)
    shellread._long_kept.cache_clear()
    assert rule_list.first_match("Bash", {"command": command}, "/w") == "Bash(rm -rf *)"
    assert calls == 0  # every rule was decided by the combined match, none by one per subcommand


@pytest.mark.parametrize(
    ("path", "transcript", "verdict"),
    [
        ("/home/dev/.ssh/id_rsa", "/home/dev/.claude/projects/p/s.jsonl", "deny"),
        ("/home/dev/.ssh/id_rsa", None, "deny"),  # the home unknown: every home
        ("/root/.aws/credentials", None, "deny"),
        ("/srv/ci/.ssh/id_rsa", "/srv/ci/.codex/sessions/r.jsonl", "deny"),
        ("/srv/ci/.ssh/id_rsa", None, None),
        ("/home/dev/notes/a.md", "/home/dev/.claude/projects/p/s.jsonl", "allow"),
        ("/home/dev/notes/a.md", None, None),  # an allow of ~ needs the agent's home
        ("/opt/keys/id_ed25519", None, "deny"),  # //**/ is any directory
        ("/work/repo/id_ed25519", None, "deny"),
    ],
)
def test_home_and_any_directory_in_compiled_path_rules(path: str, transcript: str | None, verdict: str | None) -> None:
    lists = compile_lists(
        ("Read(~/.ssh/**)", "Read(~/.aws/credentials)", "Read(//**/id_ed25519)"), (), ("Read(~/notes/**)",)
    )
    hook_input: dict[str, Any] = {"tool_name": "Read", "tool_input": {"file_path": path}, "cwd": "/work/repo"}
    hook_input["transcript_path"] = transcript
    found = rulelists.first_verdict(lists, hook_input)
    assert (found[0] if found else None) == verdict
    for rule_list in lists:  # the compiled answer is the rules' own, one by one
        one_by_one = next(
            (
                text
                for _, rule, text in rule_list.rules
                if rule_matches(
                    rule,
                    "Read",
                    hook_input["tool_input"],
                    "/work/repo",
                    kind=rule_list.verdict,
                    home=agent_home(hook_input),
                )
            ),
            None,
        )
        assert (
            rule_list.first_match("Read", hook_input["tool_input"], "/work/repo", agent_home(hook_input)) == one_by_one
        )


EXPANSION_RULES = ("Bash(git push *--force*)", "Bash(rm -rf *)", "Bash(kubectl delete *)", "Bash(npm publish)")


@pytest.mark.parametrize(
    "command",
    [
        "git log $BRANCH",
        "kubectl logs $POD",
        "npm test -- $ARGS",
        "git commit -m \"$(cat <<'EOF'\nfix: a thing\nEOF\n)\"",
        "git log --oneline $RANGE -- src",
    ],
)
def test_an_expansion_after_words_no_rule_can_follow_meets_no_rule(command: str) -> None:
    (rule_list,) = compile_lists(EXPANSION_RULES, (), ())
    tool_input = {"command": command}
    assert rule_list.first_match("Bash", tool_input, "/w") is None
    assert reference(rule_list, tool_input) is None


@pytest.mark.parametrize(
    ("command", "rule"),
    [
        ("git $SUB --force", "Bash(git push *--force*)"),
        ("git push origin $BRANCH", "Bash(git push *--force*)"),  # $BRANCH may be --force
        ("rm $FLAGS /", "Bash(rm -rf *)"),
        ("rm -r -f $DIR", "Bash(rm -rf *)"),
        ("kubectl $VERB ns prod", "Bash(kubectl delete *)"),
        ("npm $(echo publish)", "Bash(npm publish)"),
        ("$CMD anything", "Bash(git push *--force*)"),  # the program itself: every rule
    ],
)
def test_an_expansion_where_a_rule_could_follow_meets_it(command: str, rule: str) -> None:
    (rule_list,) = compile_lists(EXPANSION_RULES, (), ())
    tool_input = {"command": command}
    assert rule_list.first_match("Bash", tool_input, "/w") == rule
    assert reference(rule_list, tool_input) == rule


@pytest.mark.parametrize(
    "hook_input",
    [
        {"tool_name": "Bash", "tool_input": {"command": "git push origin main"}, "cwd": "/w"},
        {"tool_name": "Bash", "tool_input": {"command": "ls; sudo rm -rf /"}, "transcript_path": "/home/a/.claude/x"},
        {"tool_name": "Read", "tool_input": {"file_path": "/home/a/.ssh/id"}, "transcript_path": "/home/a/.claude/x"},
        {"tool_name": "mcp__fs__read", "tool_input": {"path": "/w/x"}},
        {"tool_name": 3, "tool_input": {"command": "git status"}},
        {"tool_name": "Bash", "tool_input": "git status"},
    ],
)
def test_a_call_read_once_decides_as_each_handler_reading_it(hook_input: dict[str, Any]) -> None:
    # The engine reads an event's call once for all its rule handlers: the same answers.
    call = rulelists.read_call(hook_input)
    assert (call is None) == (not isinstance(hook_input["tool_name"], str))
    for lists in (compile_lists(DENY, (), ()), compile_lists(("Read(~/.ssh/**)",), ("Bash(ls)",), ("Read",))):
        for event in ("PreToolUse", "PostToolUse"):
            alone = rulelists.decide_rules(lists, "why", event, hook_input)
            shared = rulelists.decide_rules(lists, "why", event, hook_input, call)
            assert (shared.outcome, shared.output, shared.rule, shared.decided) == (
                alone.outcome,
                alone.output,
                alone.rule,
                alone.decided,
            )


@pytest.mark.timeout(10)
@pytest.mark.parametrize("event", ["PreToolUse", "PermissionRequest", "PostToolUse", "PostToolUseFailure", "Stop"])
@pytest.mark.parametrize("verdict", ["deny", "ask", "allow"])
def test_a_note_is_where_adding_it_to_the_answer_puts_it(event: str, verdict: str) -> None:
    """A handler's note (the facts its ``when:`` held on) is in its answer as :func:`with_note`
    adds it to the answer made without one, for every event and verdict."""
    lists = compile_lists(*(("Bash(rm *)",) if kind == verdict else () for kind in ("deny", "ask", "allow")))
    hook_input = {"hook_event_name": event, "tool_name": "Bash", "tool_input": {"command": "rm -rf x"}, "cwd": "/w"}
    note = " [session facts: private_data]"
    plain = rulelists.decide_rules(lists, "why", event, hook_input)
    noted = rulelists.decide_rules(lists, "why", event, hook_input, note=note)
    expected = with_note(rulelists.decide_rules(lists, "why", event, hook_input), note)
    assert (noted.output, noted.decided, noted.reason, noted.rule) == (
        expected.output,
        expected.decided,
        expected.reason,
        expected.rule,
    )
    if "why" in str(plain.output):  # an answer that carries its reason carries the note after it
        assert note in str(noted.output) and noted.output != plain.output
