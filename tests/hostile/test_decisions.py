"""Every hostile input gets its decision from the example policy's rules, in-process.

No timings here (``bench/hostile.py`` measures them): the tests assert that each shape is
denied, by its rule or because it cannot be judged, and that masking and the depth check
finish with an answer.
"""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest

from bus.policy.loading import Policy, load_policy, policy_from_text
from bus.policy.schema import RuleHandler
from bus.redaction.redact import DEFAULT
from bus.rules.bashsplit import parse_commands
from bus.rules.limits import DEFAULT_LIMITS, Limits, depth_over, json_depth_over
from bus.stream.protocol import VIEW_DEPTH, Request, now_ms, payload_json
from tests.conftest import REPO
from tests.hostile.inputs import COMMAND_UNITS, OPEN_UNITS, SECRET_UNITS, command, fill, nested, nested_json
from workers.engine.evaluation import selected
from workers.engine.judging import judge_command, judged
from workers.handlers.context import HookContext
from workers.handlers.rule import evaluate_rules, run_rule

# System tier though in-process: the shapes at the body limit take ~15 s of CPU, more than
# half the unit tier's budget (tests/conftest.py, the tiers), so they run with the system tests.
pytestmark = [pytest.mark.timeout(120), pytest.mark.system]

POLICY: Policy = load_policy([REPO / "examples" / "policy.yaml"])
#: Under the command limit (split, in a thread) and over it (not split at all), at the body limit.
SIZES = (60 * 1024, 1_000_000)


def bash(text: str) -> dict[str, Any]:
    return {
        "hook_event_name": "PreToolUse",
        "session_id": "s",
        "cwd": "/work",
        "tool_name": "Bash",
        "tool_input": {"command": text},
    }


async def verdicts(
    hook_input: dict[str, Any], policy: Policy = POLICY, limits: Limits | None = None, tenant: str = ""
) -> list[str]:
    """Every rule handler's verdict on ``hook_input``, as the dispatcher's engine judges it (under
    ``limits``, by default the policy's, for ``tenant``)."""
    limits = limits or policy.settings.limits
    found = await judge_command(hook_input, limits, 1.5, tenant)
    out = []
    with judged(found, limits):
        for entry in policy.entries("PreToolUse"):
            if isinstance(entry.handler, RuleHandler) and selected(entry, "PreToolUse", hook_input):
                if (verdict := evaluate_rules(entry.handler, hook_input)) is not None:
                    out.append(verdict[0])
    return out


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("name", sorted(COMMAND_UNITS) + sorted(OPEN_UNITS))
async def test_every_shape_of_the_shell_grammar_is_denied_at_any_size(name: str, size: int) -> None:
    unit = COMMAND_UNITS.get(name) or OPEN_UNITS[name]
    assert "deny" in await verdicts(bash(command(unit, size)))


async def test_the_same_command_alone_is_denied_by_its_rule() -> None:
    assert await verdicts(bash("rm -rf /")) == ["deny"]  # the dangerous-commands pack's Bash handler


async def test_a_command_over_the_limit_never_meets_an_allow_rule_and_the_reason_says_why() -> None:
    allowing = policy_from_text("""
hookbus: {limits: {commandBytes: 1024}}
hooks:
  PreToolUse:
    - matcher: Bash
      hooks:
        - {type: rule, allow: ["Bash(echo *)"], deny: ["Bash(rm *)"]}
""")
    long_echo = "echo " + "a" * 2000
    assert await verdicts(bash(long_echo), allowing) == ["deny"]
    assert await verdicts(bash("echo hi"), allowing) == ["allow"]
    entry = allowing.entries("PreToolUse")[0]
    request = Request(
        event_id="e", event="PreToolUse", tenant="t", payload=orjson.dumps(bash(long_echo)), received_ms=now_ms()
    )
    found = await judge_command(bash(long_echo), allowing.settings.limits, 1.5)
    with judged(found, allowing.settings.limits):
        result = await run_rule(HookContext(request, bash(long_echo), entry, allowing, 1.0, None))
    assert result.output is not None
    reason = result.output["hookSpecificOutput"]["permissionDecisionReason"]
    assert "2005 bytes, over the limit of 1024" in reason and "cannot be judged" in reason


async def test_a_split_that_runs_out_of_time_cannot_be_judged() -> None:
    from bus.rules.bashsplit import split_within

    assert split_within(command("a | ", 60 * 1024), False, 0.0) == "the command could not be split within 0 s"
    assert isinstance(split_within(command("a | ", 60 * 1024), False, 5.0), tuple)


async def test_the_event_loop_keeps_running_while_a_long_command_is_split() -> None:
    ticks = 0
    done = asyncio.Event()

    async def ticker() -> None:
        nonlocal ticks
        while not done.is_set():
            ticks += 1
            await asyncio.sleep(0)

    task = asyncio.create_task(ticker())
    found = await judge_command(bash(command("`a` ", 60 * 1024)), DEFAULT_LIMITS, 1.5)
    done.set()
    await task
    assert found is not None and ticks > 1  # the loop turned while the thread split


def test_paths_and_urls_over_the_string_limit_cannot_be_judged() -> None:
    from bus.rules.limits import using_limits
    from bus.rules.permissions import parse_rule, rule_matches

    path = "/work/" + "a/" * 3000 + ".env"
    with using_limits(Limits(stringBytes=1024)):
        assert rule_matches(parse_rule("Read(**/.env)"), "Read", {"file_path": path}, "/work", kind="deny")
        assert not rule_matches(parse_rule("Read(**)"), "Read", {"file_path": path}, "/work", kind="allow")
        url = "https://example.com/" + "a" * 2000
        assert rule_matches(parse_rule("WebFetch(domain:evil.com)"), "WebFetch", {"url": url}, kind="deny")


@pytest.mark.parametrize("name", sorted(SECRET_UNITS))
def test_masking_finishes_on_every_detector_prefix_at_the_body_limit(name: str) -> None:
    text = fill(SECRET_UNITS[name], 1_000_000)
    masked = DEFAULT.value({"tool_input": {"command": text}})
    assert isinstance(masked["tool_input"]["command"], str)


def test_a_secret_after_a_run_of_detector_prefixes_is_still_masked() -> None:
    text = fill("curl ", 100_000) + "curl -u admin:hunter2-secret https://x"
    masked = DEFAULT.value(text)
    assert "hunter2-secret" not in masked
    assert "TOKEN=[REDACTED" in DEFAULT.value("TOKEN=abc=def=ghi") and "def" not in DEFAULT.value("TOKEN=abc=def")


@pytest.mark.parametrize("depth", [1, 63, 64, 65, 199, 200, 201, 253, 254, 255, 990, 1023, 1024])
def test_depth_is_measured_without_recursion_at_every_depth(depth: int) -> None:
    value = orjson.loads(nested_json(depth)) if depth <= 1023 else nested(depth)
    over = depth_over(value, 64)
    assert over == (None if depth <= 64 else 65)


@pytest.mark.parametrize("depth", [1, 63, 64, 65, 199, 200, 201, 990, 1023])
def test_a_json_texts_depth_counts_its_brackets_first_and_agrees_with_the_walk(depth: int) -> None:
    raw = nested_json(depth)
    value = orjson.loads(raw)
    assert json_depth_over(raw, value, 64) == depth_over(value, 64)
    # Brackets in strings only make it walk: the answer is the walk's.
    padded = b'{"note": "' + b"[{" * 100 + b'", "v": ' + nested_json(min(depth, 500)) + b"}"
    assert json_depth_over(padded, orjson.loads(padded), 64) == depth_over(orjson.loads(padded), 64)
    assert json_depth_over(b"[]", [], 0) == 1 and json_depth_over(b"7", 7, 0) is None


@pytest.mark.parametrize("depth", [VIEW_DEPTH, VIEW_DEPTH + 1, 990, 1023])
def test_a_stored_input_too_deep_to_write_again_is_shown_as_text(depth: int) -> None:
    payload = b'{"command": "rm -rf /", "pad": ' + nested_json(depth - 1) + b"}"
    view = payload_json(payload)
    orjson.dumps(view)  # whatever the depth, the view can be written
    assert isinstance(view, dict if depth <= VIEW_DEPTH else str)


def test_a_long_command_splits_the_same_with_and_without_a_deadline() -> None:
    from bus.rules.bashsplit import split_within

    text = command("a && b | `c` $(d) 'e' \"f $g\" ", 20_000)
    assert split_within(text, False, 10.0) == parse_commands(text)
