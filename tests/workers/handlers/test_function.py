"""``function`` handlers and plugin callbacks (:mod:`workers.handlers.function`, :mod:`bus.hooks.plugins`).

The callables under test live in this module and are named ``tests.workers.handlers.test_function:<attr>``
in policies: the runner imports this very module, so tests and callables share its globals.
Runner tests build a :class:`HookContext` by hand; the others go through the full path (a live
gateway and an in-process dispatcher). Blocking functions wait on ``threading.Event`` s that
the test sets; nothing synchronises with sleeps.
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from bus.hooks.models import HookInput, HookOutput, HookSpecificOutput
from bus.hooks.plugins import clear_hooks, register_hook
from bus.hooks.results import HandlerResult, Outcome
from bus.policy.loading import policy_from_text
from bus.stream.protocol import Request, now_ms
from tests.conftest import BusProbe, async_wait_for, policy_yaml
from workers.handlers import function
from workers.handlers.context import HookContext

ME = "tests.workers.handlers.test_function"
SEEN: list[HookInput] = []
THREADS: list[str] = []
NOT_CALLABLE = 42
IMPORT_ATTEMPTS: list[int] = []
BLOCKER_STARTED = threading.Event()
BLOCKER_RELEASE = threading.Event()


@pytest.fixture(autouse=True)
def _clean() -> Iterator[None]:
    """No plugin callbacks or recorded calls leak between tests."""
    clear_hooks()
    SEEN.clear()
    THREADS.clear()
    BLOCKER_STARTED.clear()
    BLOCKER_RELEASE.clear()
    yield
    BLOCKER_RELEASE.set()  # a test that failed half-way must not leave a thread waiting
    clear_hooks()


# -- the callables --------------------------------------------------------------------------------


def record(hook_input: HookInput) -> None:
    SEEN.append(hook_input)
    THREADS.append(threading.current_thread().name)


async def async_deny(hook_input: HookInput) -> str:
    SEEN.append(hook_input)
    return f"async says no to {hook_input.tool_name}"


class AsyncCallable:
    async def __call__(self, hook_input: HookInput) -> dict[str, Any]:
        return {"systemMessage": f"object saw {hook_input.session_id}"}


async_object = AsyncCallable()


def returns_hook_output(hook_input: HookInput) -> HookOutput:
    specific = HookSpecificOutput(
        hookEventName="PreToolUse", permissionDecision="ask", permissionDecisionReason="model says ask"
    )
    return HookOutput(hookSpecificOutput=specific)


def returns_dict(hook_input: HookInput) -> dict[str, Any]:
    return {"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "allow"}, "unknownKey": 1}


def returns_bad_dict(hook_input: HookInput) -> dict[str, Any]:
    return {"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "maybe"}}


def returns_string(hook_input: HookInput) -> str:
    return "Permission denied: not today"


def returns_empty_string(hook_input: HookInput) -> str:
    return ""


def seed_block(hook_input: HookInput) -> dict[str, Any]:
    return {"action": "block", "message": "sensitive variable in command"}


def seed_continue(hook_input: HookInput) -> dict[str, Any]:
    return {"action": "continue"}


def seed_modify_args(hook_input: HookInput) -> dict[str, Any]:
    command = (hook_input.tool_input or {}).get("command", "")
    return {"action": "modify", "modifications": {"args": {"command": f"{command} --dry-run"}}}


def seed_modify_messages(hook_input: HookInput) -> dict[str, Any]:
    return {"action": "modify", "modifications": {"messages": [{"role": "user", "content": "short"}]}}


def seed_bad_action(hook_input: HookInput) -> dict[str, Any]:
    return {"action": "explode"}


def returns_number(hook_input: HookInput) -> int:
    return 7


def raises(hook_input: HookInput) -> None:
    raise RuntimeError("database is down")


def blocker(hook_input: HookInput) -> str:
    BLOCKER_STARTED.set()
    assert BLOCKER_RELEASE.wait(timeout=10), "never released"
    return "blocked after the wait"


def no_opinion(hook_input: HookInput) -> None:
    return None


# -- helpers ------------------------------------------------------------------------------------------


def bash(command: str = "ls", event: str = "PreToolUse", **extra: Any) -> dict[str, Any]:
    return {
        "hook_event_name": event,
        "session_id": "s-fn",
        "cwd": "/tmp",
        "tool_name": "Bash",
        "tool_input": {"command": command},
        **extra,
    }


def context(function_name: str, hook_input: dict[str, Any]) -> HookContext:
    event = hook_input["hook_event_name"]
    policy = policy_from_text(
        yaml.safe_dump({"hooks": {event: [{"hooks": [{"type": "function", "function": function_name}]}]}})
    )
    request = Request(event_id="e-1", event=event, tenant="t", payload=b"{}", received_ms=now_ms())
    return HookContext(request, hook_input, policy.entries(event)[0], policy, 5.0)


async def run(function_name: str, hook_input: dict[str, Any] | None = None) -> HandlerResult:
    return await function.run(context(function_name, hook_input or bash()))


def specific(result: HandlerResult) -> dict[str, Any]:
    assert result.outcome is Outcome.OK, result.reason
    assert result.output is not None
    value: dict[str, Any] = result.output["hookSpecificOutput"]
    return value


def fn_group(name: str, matcher: str = "*", event: str = "PreToolUse", **fields: Any) -> dict[str, Any]:
    return {event: [{"matcher": matcher, "hooks": [{"type": "function", "function": f"{ME}:{name}", **fields}]}]}


# -- calling -----------------------------------------------------------------------------------------


async def test_sync_function_gets_typed_input_in_a_worker_thread() -> None:
    result = await run(f"{ME}:record", bash("git status", effort={"level": "high"}))
    assert result.outcome is Outcome.OK and result.output is None
    [seen] = SEEN
    assert isinstance(seen, HookInput)
    assert seen.tool_input == {"command": "git status"}
    assert seen.extra_fields == {"effort": {"level": "high"}}
    assert THREADS[0].startswith("hookbus-function")


async def test_async_function_and_async_callable_object_are_awaited() -> None:
    denied = await run(f"{ME}:async_deny")
    assert specific(denied)["permissionDecision"] == "deny"
    assert specific(denied)["permissionDecisionReason"] == "async says no to Bash"
    assert (await run(f"{ME}:async_object")).output == {"systemMessage": "object saw s-fn"}


# -- return forms ------------------------------------------------------------------------------------


async def test_none_and_empty_string_are_no_opinion() -> None:
    for name in ("no_opinion", "returns_empty_string", "seed_continue"):
        result = await run(f"{ME}:{name}")
        assert (result.outcome, result.output) == (Outcome.OK, None), name


async def test_hook_output_and_dict_are_checked_output() -> None:
    asked = specific(await run(f"{ME}:returns_hook_output"))
    assert asked == {
        "hookEventName": "PreToolUse",
        "permissionDecision": "ask",
        "permissionDecisionReason": "model says ask",
    }
    allowed = await run(f"{ME}:returns_dict")
    assert allowed.output == {"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "allow"}}
    bad = await run(f"{ME}:returns_bad_dict")
    assert bad.outcome is Outcome.ERROR and "permissionDecision" in (bad.reason or "")


@pytest.mark.parametrize(
    ("event", "expected"),
    [
        (
            "PreToolUse",
            {
                "hookSpecificOutput": {
                    "hookEventName": "PreToolUse",
                    "permissionDecision": "deny",
                    "permissionDecisionReason": "Permission denied: not today",
                }
            },
        ),
        (
            "PermissionRequest",
            {
                "hookSpecificOutput": {
                    "hookEventName": "PermissionRequest",
                    "decision": {"behavior": "deny", "message": "Permission denied: not today"},
                }
            },
        ),
        ("Stop", {"decision": "block", "reason": "Permission denied: not today"}),
    ],
)
async def test_a_string_blocks_with_that_reason(event: str, expected: dict[str, Any]) -> None:
    assert (await run(f"{ME}:returns_string", bash(event=event))).output == expected


async def test_seed_results_map_to_claude_code_output() -> None:
    blocked = specific(await run(f"{ME}:seed_block"))
    assert (blocked["permissionDecision"], blocked["permissionDecisionReason"]) == (
        "deny",
        "sensitive variable in command",
    )
    assert (await run(f"{ME}:seed_block", bash(event="UserPromptSubmit"))).output == {
        "decision": "block",
        "reason": "sensitive variable in command",
    }
    modified = specific(await run(f"{ME}:seed_modify_args", bash("make deploy")))
    assert modified["updatedInput"] == {"command": "make deploy --dry-run"}
    messages = specific(
        await run(f"{ME}:seed_modify_messages", {"hook_event_name": "PreSampling", "session_id": "s-fn"})
    )
    assert messages["updatedMessages"] == [{"role": "user", "content": "short"}]


async def test_unusable_results_are_errors() -> None:
    wrong_event = await run(f"{ME}:seed_modify_args", bash(event="Stop"))
    assert wrong_event.outcome is Outcome.ERROR
    assert "only supported on PreToolUse" in (wrong_event.reason or "")
    bad_action = await run(f"{ME}:seed_bad_action")
    assert bad_action.outcome is Outcome.ERROR and "'explode'" in (bad_action.reason or "")
    number = await run(f"{ME}:returns_number")
    assert number.outcome is Outcome.ERROR and "returned int" in (number.reason or "")


# -- failures -----------------------------------------------------------------------------------------


async def test_exception_is_a_non_blocking_error() -> None:
    result = await run(f"{ME}:raises")
    assert result.outcome is Outcome.ERROR
    assert result.reason == f"{ME}:raises raised RuntimeError: database is down"


async def test_import_errors_are_errors_and_imported_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    missing_module = await run("tests.workers.no_such_module:fn")
    assert missing_module.outcome is Outcome.ERROR and "ModuleNotFoundError" in (missing_module.reason or "")
    missing_attr = await run(f"{ME}:no_such_attr")
    assert missing_attr.outcome is Outcome.ERROR and "AttributeError" in (missing_attr.reason or "")
    not_callable = await run(f"{ME}:NOT_CALLABLE")
    assert not_callable.outcome is Outcome.ERROR and "not callable" in (not_callable.reason or "")
    name = f"broken_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text(
        f"import {ME} as t\nt.IMPORT_ATTEMPTS.append(1)\nraise ValueError('bad config')\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    first, second = await run(f"{name}:fn"), await run(f"{name}:fn")
    assert first.outcome is second.outcome is Outcome.ERROR
    assert "ValueError: bad config" in (first.reason or "")
    assert IMPORT_ATTEMPTS == [1]  # the failure is cached, not retried on every event


# -- through the full path -----------------------------------------------------------------------


async def test_blocking_sync_function_does_not_stall_other_events(platform: Callable[..., Any]) -> None:
    hooks = {
        "PreToolUse": [
            {"matcher": "Bash", "hooks": [{"type": "function", "function": f"{ME}:blocker"}]},
            {"matcher": "Write", "hooks": [{"type": "function", "function": f"{ME}:returns_string"}]},
        ]
    }
    async with platform(policy_yaml(hooks)) as p:
        slow = asyncio.create_task(p.post(bash("sleep")))
        await async_wait_for(BLOCKER_STARTED.is_set)
        quick = await p.post({**bash(), "tool_name": "Write", "tool_input": {"file_path": "/tmp/x"}})
        assert quick.json()["hookSpecificOutput"]["permissionDecision"] == "deny"
        assert not slow.done()  # still waiting on the blocked thread
        BLOCKER_RELEASE.set()
        answer = (await slow).json()["hookSpecificOutput"]
        assert answer["permissionDecisionReason"] == "blocked after the wait"


async def test_fail_closed_function_error_denies(platform: Callable[..., Any], bus: BusProbe) -> None:
    async with platform(policy_yaml(fn_group("raises", failMode="closed"))) as p:
        response = await p.post(bash())
        specific_output = response.json()["hookSpecificOutput"]
        assert specific_output["permissionDecision"] == "deny"
        assert "database is down" in specific_output["permissionDecisionReason"]
    async with platform(policy_yaml(fn_group("raises"))) as p:
        assert (await p.post(bash())).json() == {}  # fail open by default


async def test_example_permission_plugin_blocks_through_the_full_path(
    platform: Callable[..., Any], bus: BusProbe
) -> None:
    text = policy_yaml(fn_group("no_opinion"), plugins=["examples.plugins.permission"])
    async with platform(text) as p:
        denied = await p.post(bash("sudo rm -rf /"))
        output = denied.json()["hookSpecificOutput"]
        assert output["permissionDecision"] == "deny"
        assert output["permissionDecisionReason"] == "Permission denied: 'rm -rf' is not allowed in Bash commands"
        assert (await p.post(bash("ls -la"))).json() == {}
        record = await async_wait_for(lambda: bus.record(denied.headers["X-Hookbus-Event-Id"]))
        assert [(h["type"], h["id"]) for h in record.hooks][-1] == (
            "function",
            "plugin:examples.plugins.permission.permission_hook",
        )


async def test_registered_callbacks_intercept_in_order(platform: Callable[..., Any], bus: BusProbe) -> None:
    calls: list[str] = []

    def first(hook_input: HookInput) -> None:
        calls.append(f"first:{hook_input.hook_event_name}")

    async def second(hook_input: HookInput) -> str:
        calls.append("second")
        return "second intercepts"

    def third(hook_input: HookInput) -> str:
        calls.append("third")
        return "never asked"

    for callback in (first, second, third):
        register_hook("PreToolUse", callback)
    register_hook("PostToolUse", first)
    async with platform(policy_yaml(fn_group("no_opinion"))) as p:
        denied = (await p.post(bash())).json()["hookSpecificOutput"]
        assert denied["permissionDecisionReason"] == "second intercepts"
        assert calls == ["first:PreToolUse", "second"]
        # PostToolUse has no policy handler: recorded, and the dispatcher still runs its plugins.
        await p.post(bash(event="PostToolUse", tool_response={"ok": True}))
        await async_wait_for(lambda: "first:PostToolUse" in calls)
