"""Verdicts kept per call: a repeated call gets the verdict it got the first time, and whatever
the verdict depends on besides the command or paths (a parameter a rule names, the working
directory, the agent's home, ``hookbus.limits``, a judgement made for the event) is in its key."""

from __future__ import annotations

import gc
import weakref
from typing import Any

import pytest

from bus.policy import rulelists
from bus.policy.rulelists import compile_lists, first_verdict
from bus.policy.verdictcache import kept_info
from bus.rules import bashsplit
from bus.rules.limits import Limits, using_limits

pytestmark = pytest.mark.timeout(60)

LISTS = compile_lists(
    ("Bash(rm -rf *)", "Bash(timeout:1*)", "Read(~/.ssh/**)", "Read(./secret.txt)"),
    ("Bash(git push *)",),
    ("Bash(git status)", "Read(~/notes/**)", "Read"),
)


def bash(command: str, **params: Any) -> dict[str, Any]:
    return {"tool_name": "Bash", "cwd": "/w", "tool_input": {"command": command, **params}}


def read(path: str, cwd: str = "/w", home: str | None = None) -> dict[str, Any]:
    hook_input: dict[str, Any] = {"tool_name": "Read", "cwd": cwd, "tool_input": {"file_path": path}}
    if home is not None:
        hook_input["transcript_path"] = f"{home}/.claude/projects/p/s.jsonl"
    return hook_input


def test_a_repeated_call_is_found_kept_with_the_same_verdict() -> None:
    first = first_verdict(LISTS, bash("rm -rf /tmp/kept-test"))
    before = kept_info()[0]
    assert first_verdict(LISTS, bash("rm -rf /tmp/kept-test")) == first == ("deny", "Bash(rm -rf *)")
    assert kept_info()[0] == before + 1


def test_a_parameter_a_rule_names_is_in_the_key() -> None:
    assert first_verdict(LISTS, bash("git status", timeout=5)) == ("allow", "Bash(git status)")
    assert first_verdict(LISTS, bash("git status", timeout=10)) == ("deny", "Bash(timeout:1*)")
    assert first_verdict(LISTS, bash("git status", timeout=5)) == ("allow", "Bash(git status)")
    # One no rule names is not: the verdict is found kept whatever its value.
    before = kept_info()[0]
    assert first_verdict(LISTS, bash("git status", timeout=5, description="x")) == ("allow", "Bash(git status)")
    assert kept_info()[0] == before + 1


def test_the_working_directory_and_the_home_are_in_the_key() -> None:
    assert first_verdict(LISTS, read("/w/secret.txt")) == ("deny", "Read(./secret.txt)")
    assert first_verdict(LISTS, read("/w/secret.txt", cwd="/v")) == ("allow", "Read")
    assert first_verdict(LISTS, read("/home/a/notes/x", home="/home/a")) == ("allow", "Read(~/notes/**)")
    assert first_verdict(LISTS, read("/home/a/notes/x", home="/home/b")) == ("allow", "Read")


def test_the_limits_are_in_the_key() -> None:
    long_path = read("/w/" + "y" * 300)
    assert first_verdict(LISTS, long_path) == ("allow", "Read")
    with using_limits(Limits(stringBytes=256)):  # a path too long to judge meets every deny rule
        assert first_verdict(LISTS, long_path) == ("deny", "Read(~/.ssh/**)")
        assert first_verdict(LISTS, long_path) == ("deny", "Read(~/.ssh/**)")
    assert first_verdict(LISTS, long_path) == ("allow", "Read")


def test_a_judgement_made_for_the_event_comes_before_a_kept_verdict() -> None:
    command = "git status"
    assert first_verdict(LISTS, bash(command)) == ("allow", "Bash(git status)")
    token = bashsplit.prepare({(command, False): "too many subcommands"})
    try:
        assert first_verdict(LISTS, bash(command)) == ("deny", "Bash(rm -rf *)")
    finally:
        bashsplit.reset_prepared(token)
    assert first_verdict(LISTS, bash(command)) == ("allow", "Bash(git status)")


def test_a_parameter_that_is_a_list_is_judged_each_time() -> None:
    assert first_verdict(LISTS, bash("git status", timeout=["1"])) == ("allow", "Bash(git status)")
    assert first_verdict(LISTS, bash("rm -rf /", timeout=["1"])) == ("deny", "Bash(rm -rf *)")


def test_kept_verdicts_keep_no_lists_alive_past_a_compile() -> None:
    lists = (rulelists.compile_list("deny", ("Bash(rm -rf *)",)),)  # not through the compiled lists' cache
    assert first_verdict(lists, bash("rm -rf /tmp/alive-test")) == ("deny", "Bash(rm -rf *)")
    assert first_verdict(lists, bash("rm -rf /tmp/alive-test")) == ("deny", "Bash(rm -rf *)")
    compiled = weakref.ref(lists[0])
    del lists
    compile_lists(("Bash(alive-test *)",), (), ())  # a policy (re)loaded: lists compiled anew
    gc.collect()
    assert compiled() is None
