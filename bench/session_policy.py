"""What session policy (``hookbus.session``, ``when:``) adds to a dispatcher's CPU per event, and
how large a session's state grows.

CPU: the engine evaluates the same events under two policies in one run, in-process (no Redis):
a *baseline* of 100 ``rule`` handlers, and the same 100 handlers each behind a ``when:`` on one of
50 facts (set by ``PreToolUse`` rules) with 100 more rules counting into windowed counters and a
budget, read on a session state built from ``--history`` earlier events. Each event is decided
as a dispatcher decides it: on the state the settle of the session's last event returned, whose
answer (the JSON of the state, made here as the script makes it) it reads and keeps, with the
rest of what a dispatcher does for an event: the state's key and the session's turn, then the
event's record (built, masked and encoded: :func:`workers.dispatcher.records.stored_record`) and
its settle call's keys and arguments (:meth:`workers.dispatcher.outbox.Outbox._settle_call`: the
record's chain digest, the sealed reply, the session's part), as the dispatcher makes them for
both policies; with session policy the record holds the session's ``facts`` and ``budgets`` and
the call its session arguments. Nothing is sent. The figure is the difference per event.
Each policy keeps its own ``rule`` verdicts, as a dispatcher keeps those of its policy. The
same is measured for ``examples/rule-of-two.yaml`` against its handlers alone (its session of
10,000 events has used up its ``tool_calls`` budget: every call asks), for the example with that
budget out of reach (no call asks), and for the example with the 100 session rules added (its
four handlers behind ``when:``, not 100), its budget used up and out of reach.
``bench/session_dispatcher.py`` measures the first policy end to end.

Memory: the state (as ``HGETALL`` returns it, in bytes of JSON) of one session of
``examples/rule-of-two.yaml`` after 1,000 to ``--events`` events of a realistic mix, applied as
the settle script applies them (:func:`bus.session.apply.apply_ops`, which the tests compare
with the Lua).

    .venv/bin/python bench/session_policy.py --events 1000000
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import random
import time
from pathlib import Path
from typing import Any

import orjson
import redis.asyncio
import yaml

from bus.hooks.decisions import RecordOutcome
from bus.policy import verdictcache
from bus.policy.loading import Policy, policy_from_text
from bus.redaction.redact import Redactor
from bus.redis.keys import Keyspace
from bus.runtime.metrics import Metrics
from bus.session.apply import apply_ops
from bus.session.definitions import FIRST_SEEN_FIELD, session_policy
from bus.session.effects import effects
from bus.session.state import SessionState
from bus.stream.protocol import Request, now_ms
from workers.dispatcher.outbox import Outbox, Settle
from workers.dispatcher.records import evaluation_reply, stored_record
from workers.dispatcher.sessions import SessionStates
from workers.dispatcher.turns import SessionTurns
from workers.engine.evaluation import Engine

ROOT = Path(__file__).resolve().parents[1]
STREAM = "bench-stream"  # the entries' stream (an entry holds its session's turn)
COMMANDS = ["git status", "ls -la", "pytest -q", "cat README.md", "git push origin main", "npm test", "make build"]


def policies(rules: int) -> tuple[Policy, Policy]:
    """The baseline (``rules`` plain rule handlers) and the same handlers behind ``when:``."""
    base, with_session = policy_documents(rules)
    return policy_from_text(yaml.safe_dump(base)), policy_from_text(yaml.safe_dump(with_session))


def policy_documents(rules: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """:func:`policies` as documents (what a policy file holds)."""
    facts = rules // 2
    handlers = [{"type": "rule", "ask": [f"Bash(tool{n} *)"]} for n in range(rules)]
    base = {"hookbus": {"deadlineSeconds": 5}, "hooks": {"PreToolUse": [{"matcher": "Bash", "hooks": handlers}]}}
    gated = [{**handler, "when": {"facts": [f"fact{n % facts}"]}} for n, handler in enumerate(handlers)]
    session = session_rules(rules)
    session["budgets"] = {"calls": {"counter": "tool_calls", "limit": 10**9}, **session["budgets"]}
    with_session = {
        "hookbus": {"deadlineSeconds": 5, "session": session},
        "hooks": {"PreToolUse": [{"matcher": "Bash", "hooks": gated}]},
    }
    return base, with_session


def session_rules(rules: int) -> dict[str, Any]:
    """``rules // 2`` facts (``factN``, set by ``Bash(markN *)``) and ``rules`` windowed counters
    (``countN``, of ``Bash(countN *)``), each with a budget (``bN``)."""
    return {
        "facts": {
            f"fact{n}": {"setBy": [{"event": "PreToolUse", "rules": [f"Bash(mark{n} *)"]}]} for n in range(rules // 2)
        },
        "counters": {
            f"count{n}": {"count": [{"event": "PreToolUse", "rules": [f"Bash(count{n} *)"]}], "window": "1h"}
            for n in range(rules)
        },
        "budgets": {f"b{n}": {"counter": f"count{n}", "limit": 10**6} for n in range(rules)},
    }


def event(n: int, command: str) -> tuple[Request, dict[str, Any]]:
    hook_input = {
        "hook_event_name": "PreToolUse",
        "session_id": "bench",
        "tool_name": "Bash",
        "tool_input": {"command": command},
        "cwd": "/work",
    }
    at = now_ms()
    return Request(f"e{n}", "PreToolUse", "bench", orjson.dumps(hook_input), at, at + 60_000, "bench"), hook_input


def calls(count: int, rules: int) -> list[str]:
    """The commands of the measured events: every other one a common command, else one a rule handler asks about."""
    rng = random.Random(3)
    return [rng.choice(COMMANDS) if n % 2 else f"tool{rng.randrange(rules)} x" for n in range(count)]


def history_state(policy: Policy, events: int) -> SessionState:
    """The state after ``events`` PreToolUse calls (every fact set, counters busy)."""
    compiled = session_policy(policy)
    state, at = SessionState(), now_ms() - events
    rng = random.Random(1)
    for n in range(events):
        pick = rng.randrange(len(compiled.facts) + len(compiled.counters))
        command = f"mark{pick} x" if pick < len(compiled.facts) else f"count{pick - len(compiled.facts)} x"
        state = apply_ops(
            state,
            effects(compiled, "PreToolUse", {"tool_name": "Bash", "tool_input": {"command": command}}, "none"),
            at + n,
        )
    return state


class Runner:
    """Decides events under one policy; with a session ``state``, as a dispatcher decides them:
    each on the state its session's last settle returned, with what the dispatcher does around it:
    the state's key, the session's turn, the record and the settle call, reading the settle's
    answer (the settle script's work, applying the event's operations, is Redis's and not counted)."""

    def __init__(self, policy: Policy, state: SessionState | None) -> None:
        self.policy, self.session = policy, state is not None
        self.engine = Engine(policy, None, Keyspace(), {}, async_handlers="skip")  # type: ignore[arg-type]
        self.keyspace = Keyspace()
        self.states = SessionStates(self.keyspace, Metrics(), lambda op: None)
        self.turns = SessionTurns()
        self.settle: tuple[list[str], list[Any]] | None = None  # the last settle call's keys and arguments
        self.redactor = Redactor()
        # never connected: it makes the settle call's keys and arguments, which are not sent
        self.outbox = Outbox(redis.asyncio.Redis(), self.keyspace, "redis://127.0.0.1:1/0", metrics=Metrics())
        #: Its own kept verdicts (a dispatcher keeps those of its policy alone): put in place for
        #: its runs, so that the two policies' calls do not crowd each other out of one cache.
        self.verdicts: dict[Any, Any] = {}
        if state is not None:
            self.states.put(self.keyspace.session_state("bench", "bench", 0), state)

    async def run(self, prepared: list[tuple[Request, dict[str, Any]]]) -> float:
        """CPU seconds per event of deciding ``prepared`` in turn."""
        kept = verdictcache._KEPT
        others = dict(kept)
        kept.clear()
        kept.update(self.verdicts)
        try:
            return await self._run(prepared, self.session)
        finally:
            self.verdicts = dict(kept)
            kept.clear()
            kept.update(others)

    async def _run(self, prepared: list[tuple[Request, dict[str, Any]]], session: bool) -> float:
        spent = 0.0
        for request, hook_input in prepared:
            started = time.process_time()
            if session:  # as the dispatcher does for an event of a session (Dispatcher._handle)
                key = self.states.key_of(request, hook_input["session_id"], 0)
                if not self.turns.hold(key, (STREAM, request.event_id)):
                    await self.turns.take(key, (STREAM, request.event_id))
            decided = await self.engine.evaluate(
                request, hook_input, self.policy, self.states.get(key) if session else None
            )
            outcome, known = decided.session, ""
            # its record and its settle call, as the dispatcher makes them (Dispatcher._handle,
            # Outbox._settle_call): the session's facts and budgets in the record, its arguments in the call
            record, meta = await stored_record(
                self.redactor, "bench", request, RecordOutcome.DECIDED, None, decided, hook_input
            )
            reply = evaluation_reply(request, decided)
            part = None if outcome is None else self.states.part(request, 0, key, outcome, 0)
            op = Settle(STREAM, b"1-0", request, record, reply, 1000, partition=0, session=part, record_meta=meta)
            self.settle = self.outbox._settle_call([op])
            if outcome is not None:
                known = self.settle[1][-1]
            spent += time.process_time() - started
            answer = b"" if outcome is None else settle_answer(self.states.get(key), outcome.ops, known)
            # both runners read the clock alike (a read costs about 0.3 us, half of it counted)
            started = time.process_time()
            if outcome is not None:
                self.states.answered(key, outcome, True, answer)
                self.turns.release((STREAM, request.event_id))
            spent += time.process_time() - started
        return spent / len(prepared)


async def compare(
    base: Policy, policy: Policy, state: SessionState, commands: list[str], chunk: int
) -> tuple[float, float, float]:
    """Both policies on the same events, in alternate chunks of ``chunk`` events (so both meet the
    host's load alike, and each first in every other pair): the baseline's and the policy's best
    chunk, and the median of the differences of paired chunks, per event."""
    plain, session = Runner(base, None), Runner(policy, state)
    prepared = [event(n, command) for n, command in enumerate(commands)]
    # What is built so far lives on, as what a dispatcher loads before it decides: out of the
    # collector's scans, as the dispatcher keeps it (gc.freeze() once started).
    gc.collect()
    gc.freeze()
    await plain.run(prepared[:200])  # warm the caches
    await session.run(prepared[:200])
    pairs = []
    for start in range(0, len(prepared), chunk):
        part = prepared[start : start + chunk]
        if start // chunk % 2:  # each first in every other pair: neither always runs after the other
            session_s = await session.run(part)
            pairs.append((await plain.run(part), session_s))
        else:
            pairs.append((await plain.run(part), await session.run(part)))
    differences = sorted(s - b for b, s in pairs)
    return min(b for b, _ in pairs), min(s for _, s in pairs), differences[len(differences) // 2]


def settle_answer(state: SessionState, ops: list[str], known: str) -> bytes:
    """What the settle script answers for a session at ``state`` given ``ops``: the time it
    applied them when the event was decided on that state (``known``), else the whole state."""
    at = now_ms()
    if known and known == f"{state.version}:{state.fields.get(FIRST_SEEN_FIELD, '')}":
        return orjson.dumps({"e": 0, "n": at})
    after = apply_ops(state, ops, at)
    return orjson.dumps({"e": 0, "s": [item for pair in after.fields.items() for item in pair]})


def example_policies(rules: int = 0, *, under_budget: bool = False) -> tuple[Policy, Policy]:
    """examples/rule-of-two.yaml (with ``rules`` more session rules, :func:`session_rules`), and
    the same handlers with no ``hookbus.session`` and no ``when:``. ``under_budget``: its
    ``tool_calls`` budget of 500 raised out of reach. A session of 10,000 earlier events has used
    it up, so the example's every measured call asks (each a new reason, ``tool_calls: N of
    500``), as such a session's calls do, each then waiting for a person; raised, the calls are
    those of a session under its budget, a dispatcher's usual work."""
    document = yaml.safe_load((ROOT / "examples" / "rule-of-two.yaml").read_text())
    if under_budget:
        document["hookbus"]["session"]["budgets"]["tool_calls"]["limit"] = 10**9
    if rules:
        session, more = document["hookbus"]["session"], session_rules(rules)
        for part in ("facts", "counters", "budgets"):
            session.setdefault(part, {}).update(more[part])
    plain = {"hookbus": {"deadlineSeconds": 5}, "hooks": {"PreToolUse": []}}
    for group in document["hooks"]["PreToolUse"]:
        plain["hooks"]["PreToolUse"].append({key: value for key, value in group.items() if key != "when"})
    return policy_from_text(yaml.safe_dump(plain)), policy_from_text(yaml.safe_dump(document), "rule-of-two.yaml")


#: The policies ``bench/session_counts.py`` and ``bench/session_bytecodes.py`` are run with.
NAMED_POLICIES = ("rules", "example", "example-under-budget", "example-100", "example-100-under-budget")


async def warmed_runners(name: str, events: int) -> tuple[Runner, Runner, list[tuple[Request, dict[str, Any]]]]:
    """The plain and session runners of a policy of :data:`NAMED_POLICIES` (``rules``: :func:`policies`
    of 100; ``example-100``: the example with 100 session rules; ``under-budget``: its budget out of
    reach), the session's state that of 10,000 earlier events, both warmed on 200 events, and
    ``events`` more events to decide."""
    if name == "rules":
        plain_policy, session_policy = policies(100)
    else:
        rules = 100 if name.startswith("example-100") else 0
        plain_policy, session_policy = example_policies(rules, under_budget=name.endswith("under-budget"))
    state = history_state(session_policy, 10_000)
    prepared = [event(n, command) for n, command in enumerate(calls(events + 200, 100))]
    plain, session = Runner(plain_policy, None), Runner(session_policy, state)
    gc.collect()
    gc.freeze()
    await plain.run(prepared[:200])
    await session.run(prepared[:200])
    return plain, session, prepared[200:]


def returned_state_cost(state: SessionState, runs: int) -> float:
    """What reading the settle script's answer costs (JSON of HGETALL, then a SessionState)."""
    flat = [item for pair in state.fields.items() for item in pair]
    raw = orjson.dumps({"e": 0, "s": flat})
    started = time.process_time()
    for _ in range(runs):
        SessionState.of(orjson.loads(raw)["s"])
    return (time.process_time() - started) / runs


def state_bytes(events: int) -> list[tuple[int, int, int]]:
    """(events, fields, bytes) of one session of examples/rule-of-two.yaml along ``events``."""
    policy = policy_from_text((ROOT / "examples" / "rule-of-two.yaml").read_text(), "rule-of-two.yaml")
    compiled = session_policy(policy)
    mix = [("PreToolUse", {"tool_name": "Bash", "tool_input": {"command": c}}) for c in COMMANDS] + [
        ("PreToolUse", {"tool_name": "Read", "tool_input": {"file_path": "/w/.env"}}),
        ("PostToolUse", {"tool_name": "WebFetch", "tool_input": {"url": "https://example.com/"}}),
        ("PostToolUseFailure", {"tool_name": "Bash", "tool_input": {"command": "make"}}),
        ("PostToolUse", {"tool_name": "Bash", "tool_input": {"command": "ls"}}),
    ]
    ops_of = [effects(compiled, name, {**hook_input, "cwd": "/w"}, "none") for name, hook_input in mix]
    rng = random.Random(2)
    state, at, out, mark = SessionState(), 1_700_000_000_000, [], 1000
    for n in range(1, events + 1):
        at += rng.randrange(50, 5000)  # ms between events: a session of days at 1,000,000 events
        state = apply_ops(state, ops_of[rng.randrange(len(ops_of))], at)
        if n == mark:
            flat = [item for pair in state.fields.items() for item in pair]
            out.append((n, len(state.fields), len(orjson.dumps(flat))))
            mark *= 10
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rules", type=int, default=100)
    parser.add_argument("--history", type=int, default=10_000, help="events of the session before the measured ones")
    parser.add_argument("--calls", type=int, default=20_000, help="events measured per policy")
    parser.add_argument("--events", type=int, default=1_000_000, help="events of the state-size run")
    parser.add_argument("--chunk", type=int, default=200, help="events per chunk, the policies in turn")
    args = parser.parse_args()
    base, gated = policies(args.rules)
    state = history_state(gated, args.history)
    commands = calls(args.calls, args.rules)
    baseline, session, added = asyncio.run(compare(base, gated, state, commands, args.chunk))
    parse = returned_state_cost(state, 20_000)
    what = f"{args.rules // 2} facts, {args.rules} windowed counters, {args.rules + 1} budgets"
    print(f"{args.rules} rule handlers; session policy: {what}")
    print(f"state after {args.history} events: {len(state.fields)} fields")
    print(f"{args.calls} events per policy, in alternate chunks of {args.chunk}; the best chunk of each:")
    print(f"decide, record, settle call, baseline:     {baseline * 1e6:8.1f} us CPU per event")
    print(f"the same with the session's part:          {session * 1e6:8.1f} us CPU per event")
    print(f"reading a whole state, were it answered:   {parse * 1e6:8.1f} us")
    print(f"added per event (best chunks):             {(session - baseline) * 1e6:8.1f} us")
    print(f"added per event (median of paired chunks): {added * 1e6:8.1f} us")
    plain, example = example_policies()
    example_state = history_state(example, args.history)
    plain_s, example_s, example_added = asyncio.run(compare(plain, example, example_state, commands, args.chunk))
    example_parse = returned_state_cost(example_state, 20_000)
    print(f"examples/rule-of-two.yaml: {plain_s * 1e6:.1f} us without its session parts, {example_s * 1e6:.1f} us with")
    print(
        f"  them ({example_parse * 1e6:.1f} us to read a whole state): added per event "
        f"{(example_s - plain_s) * 1e6:.1f} us (best chunks), {example_added * 1e6:.1f} us (median of paired chunks)"
    )
    plain, example = example_policies(under_budget=True)
    example_state = history_state(example, args.history)
    plain_s, example_s, example_added = asyncio.run(compare(plain, example, example_state, commands, args.chunk))
    print("the same, its tool_calls budget out of reach (no call asks): added per event", end=" ")
    print(f"{(example_s - plain_s) * 1e6:.1f} us")
    print(f"  (best chunks), {example_added * 1e6:.1f} us (median of paired chunks)")
    more = f"{args.rules // 2} facts, {args.rules} windowed counters and {args.rules} budgets"
    for under_budget in (False, True):
        plain, example = example_policies(args.rules, under_budget=under_budget)
        example_state = history_state(example, args.history)
        plain_s, example_s, example_added = asyncio.run(compare(plain, example, example_state, commands, args.chunk))
        which = ", its tool_calls budget out of reach" if under_budget else ""
        print(f"examples/rule-of-two.yaml with {more} more{which}: added per event", end=" ")
        print(f"{(example_s - plain_s) * 1e6:.1f} us")
        print(f"  (best chunks), {example_added * 1e6:.1f} us (median of paired chunks)")
    print("state of one session of examples/rule-of-two.yaml:")
    for events, fields, size in state_bytes(args.events):
        print(f"  after {events:>9,} events: {fields:3d} fields, {size:5d} bytes")


if __name__ == "__main__":
    main()
