"""The policy keys of async delivery: ``hookbus.async``, a handler's ``maxTries``/``maxAgeSeconds``, an http
handler's ``secret``; and handler ids that do not change for policies that use none of them."""

from __future__ import annotations

import hashlib
import json

import pytest

from bus.errors import PolicyError
from bus.policy.loading import policy_from_text


def problems(text: str) -> list[str]:
    with pytest.raises(PolicyError) as raised:
        policy_from_text(text)
    return [str(problem) for problem in raised.value.problems]


def test_hookbus_async_has_defaults_and_takes_overrides() -> None:
    defaults = policy_from_text("hooks: {}\n").settings.async_
    assert (defaults.max_tries, defaults.max_age_seconds, defaults.max_queued) == (5, 3600.0, 100_000)
    assert (defaults.retry_delay_seconds, defaults.keep_result_seconds) == (2.0, 0.0)
    given = policy_from_text("hookbus: {async: {maxTries: 2, maxQueued: 10, keepResultSeconds: 30}}\nhooks: {}\n")
    assert (given.settings.async_.max_tries, given.settings.async_.max_queued) == (2, 10)
    assert given.settings.async_.keep_result_seconds == 30


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("hookbus: {async: {maxTries: 0}}", "maxTries: must be >= 1"),
        ("hookbus: {async: {maxTries: 101}}", "maxTries: must be <= 100"),
        ("hookbus: {async: {maxQueud: 5}}", "unknown key 'maxQueud'"),
        ("hookbus: {async: {maxAgeSeconds: 0}}", "maxAgeSeconds: must be > 0"),
    ],
)
def test_bad_async_settings_are_refused_with_their_place(text: str, message: str) -> None:
    found = problems(text + "\nhooks: {}\n")
    assert any(message in problem for problem in found), found


def test_a_handler_may_set_its_own_tries_and_age() -> None:
    policy = policy_from_text(
        json.dumps(
            {
                "hooks": {
                    "Notification": [
                        {
                            "hooks": [
                                {
                                    "type": "command",
                                    "command": "true",
                                    "async": True,
                                    "maxTries": 9,
                                    "maxAgeSeconds": 60,
                                }
                            ]
                        }
                    ]
                }
            }
        )
    )
    handler = policy.entries("Notification")[0].handler
    assert (handler.max_tries, handler.max_age_seconds) == (9, 60.0)


@pytest.mark.parametrize("secret", ["whsec_abc", "MY_SECRET", "$1X", "$A B", "${A"])
def test_a_secret_must_name_a_variable_never_hold_the_value(secret: str) -> None:
    text = json.dumps(
        {
            "hooks": {
                "Notification": [
                    {"hooks": [{"type": "http", "url": "http://sink.internal/h", "async": True, "secret": secret}]}
                ]
            }
        }
    )
    found = problems(text)
    assert any("must name an environment variable" in problem for problem in found), found
    assert all(secret not in problem for problem in found)  # a literal secret is not echoed


@pytest.mark.parametrize("secret", ["$SINK_SECRET", "${SINK_SECRET}"])
def test_a_secret_names_a_variable(secret: str) -> None:
    text = json.dumps(
        {
            "hooks": {
                "Notification": [
                    {"hooks": [{"type": "http", "url": "http://sink.internal/h", "async": True, "secret": secret}]}
                ]
            }
        }
    )
    assert policy_from_text(text).entries("Notification")[0].handler.secret == secret  # type: ignore[union-attr]


def test_handler_ids_of_policies_without_the_new_fields_are_what_they_were() -> None:
    hook = {"type": "http", "url": "http://sink.internal/h", "async": True}
    policy = policy_from_text(json.dumps({"hooks": {"Notification": [{"matcher": "x", "hooks": [hook]}]}}))
    entry = policy.entries("Notification")[0]
    dumped = entry.handler.model_dump(mode="json", by_alias=True)
    for name in ("maxTries", "maxAgeSeconds", "secret", "agents", "when"):  # fields added after ids were handed out
        del dumped[name]
    before = json.dumps(["Notification", "x", dumped], sort_keys=True, separators=(",", ":"))
    assert entry.handler_id == hashlib.sha256(before.encode()).hexdigest()[:16]
    tuned = policy_from_text(
        json.dumps({"hooks": {"Notification": [{"matcher": "x", "hooks": [{**hook, "maxTries": 2}]}]}})
    )
    assert tuned.entries("Notification")[0].handler_id != entry.handler_id
