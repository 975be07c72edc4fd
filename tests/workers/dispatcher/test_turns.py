"""Events of one session take turns: each waits until the one before it ended, in order; a wait
past its time gives up; a turn handed to an event that gave up or was cancelled passes on."""

from __future__ import annotations

import asyncio

import pytest

from bus.stream.protocol import Request, now_ms
from workers.dispatcher.turns import DECIDE_S, WAIT_S, SessionTurns, turn_wait_s

pytestmark = pytest.mark.timeout(10)

A, B, C = ("s", b"1-0"), ("s", b"2-0"), ("s", b"3-0")


async def test_events_of_a_session_take_turns_in_order() -> None:
    turns, order = SessionTurns(), []
    assert await turns.take("k", A)

    async def decide(entry: tuple[str, bytes]) -> None:
        assert await turns.take("k", entry)
        order.append(entry)

    waiting = [asyncio.create_task(decide(B)), asyncio.create_task(decide(C))]
    await asyncio.sleep(0)
    assert order == [] and turns.holds(A)
    turns.release(A)
    await asyncio.sleep(0)
    assert order == [B] and turns.holds(B) and not turns.holds(C)
    turns.release(B)
    await asyncio.gather(*waiting)
    assert order == [B, C]
    turns.release(C)
    assert len(turns) == 0  # free again: the next takes it at once
    assert await turns.take("k", A)


async def test_other_sessions_do_not_wait() -> None:
    turns = SessionTurns()
    assert await turns.take("k", A)
    assert await turns.take("other", B)
    assert len(turns) == 2


async def test_a_wait_past_its_deadline_gives_up_and_is_skipped() -> None:
    turns = SessionTurns()
    assert await turns.take("k", A)
    assert not await turns.take("k", B, timeout_s=0.01)
    assert not turns.holds(B)
    later = asyncio.create_task(turns.take("k", C))
    await asyncio.sleep(0)
    turns.release(A)
    assert await later and turns.holds(C)


async def test_a_cancelled_waiter_passes_a_turn_it_was_handed_on() -> None:
    turns = SessionTurns()
    assert await turns.take("k", A)
    handed = asyncio.create_task(turns.take("k", B))
    after = asyncio.create_task(turns.take("k", C))
    await asyncio.sleep(0)
    turns.release(A)  # handed to B, which is cancelled before it runs
    handed.cancel()
    with pytest.raises(asyncio.CancelledError):
        await handed
    assert await after and turns.holds(C) and not turns.holds(B)


async def test_releasing_an_entry_that_holds_no_turn_changes_nothing() -> None:
    turns = SessionTurns()
    assert await turns.take("k", A)
    turns.release(B)
    assert turns.holds(A)


def test_a_blocking_event_waits_until_just_before_its_deadline_a_non_blocking_one_a_while() -> None:
    blocking = Request("e1", "PreToolUse", "default", b"{}", now_ms(), now_ms() + 5_000, "hookbus:reply:e1")
    assert 5.0 - DECIDE_S - 0.5 < turn_wait_s(blocking) <= 5.0 - DECIDE_S
    past = Request("e2", "PreToolUse", "default", b"{}", now_ms(), now_ms() - 1, "hookbus:reply:e2")
    assert turn_wait_s(past) == 0.0
    assert turn_wait_s(Request("e3", "PostToolUse", "default", b"{}", now_ms())) == WAIT_S


async def test_a_free_turn_is_held_at_once_and_a_held_one_is_waited_for() -> None:
    turns = SessionTurns()
    assert turns.hold("k", A) and turns.holds(A)
    assert not turns.hold("k", B) and not turns.holds(B)  # held by A: B must wait for it
    assert turns.hold("other", C)  # another session's is its own
    waiting = asyncio.create_task(turns.take("k", B))
    await asyncio.sleep(0)
    assert not waiting.done()
    turns.release(A)
    assert await waiting and turns.holds(B)
    turns.release(B)
    turns.release(C)
    assert len(turns) == 0 and turns.hold("k", A)
