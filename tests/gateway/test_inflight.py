"""In-flight budgets (:mod:`gateway.inflight`): bytes held per session, token and tenant."""

from __future__ import annotations

from bus.runtime.settings import Settings
from gateway.inflight import InflightBudgets, Ticket
from gateway.limits import LimitKind, Scope


def ticket(session: str, size: int = 100, tenant: str = "acme", token: str | None = "tok") -> Ticket:
    return Ticket(tenant, token, size, session)


def test_a_flooding_session_fills_its_own_budget_and_leaves_its_tenants_to_the_others() -> None:
    budgets = InflightBudgets(tenant_bytes=1_000, token_bytes=0, session_bytes=250)
    flood = [budgets.hold(ticket("noisy")) for _ in range(20)]
    assert flood[:2] == [None, None]  # 200 bytes held; a third would be 300 > 250
    assert all(
        limited is not None and (limited.scope, limited.kind) == (Scope.SESSION, LimitKind.INFLIGHT)
        for limited in flood[2:]
    )
    assert budgets.held_bytes(Scope.TENANT, "acme") == 200  # the refused 18 hold nothing
    teammates = [ticket(f"mate-{i}") for i in range(8)]
    assert [budgets.hold(t) for t in teammates] == [None] * 8  # 1,000 bytes: the tenant's budget, no more
    over = budgets.hold(ticket("mate-9"))
    assert over is not None and over.scope is Scope.TENANT and "HOOKBUS_TENANT_INFLIGHT_BYTES" in over.detail
    assert over.code == "over_budget" and over.retry_after == "1"
    assert budgets.hold(ticket("noisy", tenant="beta")) is None  # another tenant's budgets are its own


def test_release_gives_back_exactly_what_was_held() -> None:
    budgets = InflightBudgets(tenant_bytes=1_000, token_bytes=500, session_bytes=300)
    held = [ticket("a", 200), ticket("b", 200)]
    assert [budgets.hold(t) for t in held] == [None, None]
    refused = ticket("c", 200)
    limited = budgets.hold(refused)
    assert limited is not None and limited.scope is Scope.TOKEN  # 600 > the token's 500
    budgets.release(refused)  # never held: gives nothing back
    assert budgets.held_bytes(Scope.TOKEN, "tok") == 400
    for t in held:
        budgets.release(t)
        budgets.release(t)  # twice is once
    assert budgets.held == {scope: {} for scope in Scope}


def test_a_lone_request_is_let_in_whatever_its_size_and_a_budget_of_zero_is_none() -> None:
    budgets = InflightBudgets(tenant_bytes=1_000, token_bytes=0, session_bytes=100)
    assert budgets.hold(ticket("a", 900)) is None  # over the session's 100, but nothing else is held there
    assert budgets.held_bytes(Scope.TOKEN, "tok") == 0  # no token budget: nothing counted
    unlimited = InflightBudgets(tenant_bytes=0, token_bytes=0, session_bytes=0)
    assert all(unlimited.hold(ticket("a", 10**6)) is None for _ in range(100))
    assert unlimited.held == {scope: {} for scope in Scope}


def test_a_sessions_budget_is_a_quarter_of_its_tenants_unless_set() -> None:
    assert InflightBudgets.from_settings(Settings(tenant_inflight_bytes=4_000)).budgets == {
        Scope.SESSION: 1_000,
        Scope.TOKEN: 0,
        Scope.TENANT: 4_000,
    }
    chosen = InflightBudgets.from_settings(Settings(token_inflight_bytes=7, session_inflight_bytes=0))
    assert chosen.budgets[Scope.SESSION] == 0 and chosen.budgets[Scope.TOKEN] == 7
