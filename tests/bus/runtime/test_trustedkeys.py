"""``HOOKBUS_POLICY_TRUSTED_KEYS``: each key with the layers it may sign, and one line for every mistake."""

from __future__ import annotations

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from bus.errors import ConfigError
from bus.policy.signing import public_key_text, raw_public
from bus.runtime.settings import Settings
from bus.runtime.trustedkeys import EVERY_LAYER, KeyScope, parse_trusted_keys

A, B = (public_key_text(raw_public(Ed25519PrivateKey.generate())) for _ in range(2))


def refusal(spec: str) -> str:
    with pytest.raises(ConfigError) as refused:
        Settings.from_env({"HOOKBUS_POLICY_TRUSTED_KEYS": spec})
    message = str(refused.value)
    assert message.startswith("HOOKBUS_POLICY_TRUSTED_KEYS") and "\n" not in message
    return message


def test_each_key_names_the_layers_it_may_sign() -> None:
    org, acme_and_beta, teams = parse_trusted_keys(
        f"{A}@org, {B}@tenant:acme+tenant:beta ,{public_key_text(bytes(32))}@tenant"
    )
    assert org.scope == KeyScope(org=True) and str(org) == f"{A}@org"
    assert acme_and_beta.scope == KeyScope(tenants=frozenset({"acme", "beta"}))
    assert teams.scope == KeyScope(any_tenant=True)
    for entry in (org, acme_and_beta, teams):
        assert parse_trusted_keys(str(entry)) == (entry,)  # printed as it is read


@pytest.mark.parametrize(
    ("scope", "allowed", "refused"),
    [
        (KeyScope(org=True), ["org"], ["tenant:acme", "tenant:org"]),
        (KeyScope(any_tenant=True), ["tenant:acme", "tenant:beta"], ["org", "tenant:", "tenant", "acme"]),
        (KeyScope(tenants=frozenset({"acme"})), ["tenant:acme"], ["org", "tenant:beta", "tenant:acmex", "tenant:"]),
        (EVERY_LAYER, ["org", "tenant:acme"], ["", "other:acme"]),
    ],
)
def test_a_scope_allows_its_layers_and_no_other(scope: KeyScope, allowed: list[str], refused: list[str]) -> None:
    assert [layer for layer in allowed + refused if scope.allows(layer)] == allowed


def test_a_key_listed_twice_may_sign_what_either_entry_names() -> None:
    (key,) = parse_trusted_keys(f"{A}@tenant:acme,{A}@org,{A}@tenant:beta")
    assert str(key.scope) == "org+tenant:acme+tenant:beta"
    assert parse_trusted_keys(f"{A}@tenant:acme+tenant,{A}@org")[0].scope == EVERY_LAYER


def test_a_key_without_a_scope_stops_the_process_with_the_migration_in_one_line() -> None:
    message = refusal(f"{A}@org,{B}")
    assert "has no scope: append @org, @tenant or @tenant:NAME" in message
    assert "@org+tenant for every layer, as before" in message and B[:24] in message


@pytest.mark.parametrize("scope", ["", "orgs", "tenants", "tenant:", "org+", "tenant:a b", "tenant:*", "TENANT"])
def test_a_scope_that_is_not_one_is_one_line(scope: str) -> None:
    assert "is not org, tenant (any tenant) or tenant:NAME" in refusal(f"{A}@{scope}")


def test_a_bad_key_or_no_key_is_one_line() -> None:
    assert "is not an Ed25519 public key" in refusal("ed25519:bm90IGEga2V5@org")
    assert "names no key" in refusal(" , ")
