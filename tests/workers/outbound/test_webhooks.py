"""Standard Webhooks headers (:mod:`workers.outbound.webhooks`), checked with the ``standardwebhooks`` package."""

from __future__ import annotations

import base64

import pytest
from standardwebhooks import Webhook

from bus.errors import SigningError
from workers.outbound.webhooks import variable_name, webhook_headers, webhook_id

SECRET = "whsec_" + base64.b64encode(b"0123456789abcdef0123456789abcdef").decode()
BODY = b'{"hook_event_name":"Notification","session_id":"s","message":"\xc3\xa9t\xc3\xa9"}'


def test_signed_headers_verify_with_the_reference_library() -> None:
    headers = webhook_headers("ev-1:abc", BODY, "$HOOK_SECRET", {"HOOK_SECRET": SECRET})
    assert headers["webhook-id"] == "ev-1:abc"
    assert Webhook(SECRET).verify(BODY, headers)["message"] == "été"


def test_without_a_secret_there_is_an_id_and_a_timestamp_and_no_signature() -> None:
    headers = webhook_headers("ev-1:abc", BODY, None, {}, now_s=1_700_000_000.9)
    assert headers == {"webhook-id": "ev-1:abc", "webhook-timestamp": "1700000000"}


def test_the_id_is_the_event_and_the_handler() -> None:
    assert webhook_id("ev-9", "0123abcd") == "ev-9:0123abcd"
    assert variable_name("$X") == variable_name("${X}") == "X"


@pytest.mark.parametrize(
    ("environ", "message"),
    [
        ({}, "HOOK_SECRET is not set here"),
        ({"HOOK_SECRET": "plain-text-secret"}, "not a Standard Webhooks secret"),
        ({"HOOK_SECRET": "whsec_!!!!"}, "not valid base64"),
    ],
)
def test_a_secret_that_cannot_be_used_stops_the_request_and_never_shows_its_value(
    environ: dict[str, str], message: str
) -> None:
    with pytest.raises(SigningError, match=message) as raised:
        webhook_headers("ev-1:abc", BODY, "${HOOK_SECRET}", environ)
    for value in environ.values():
        assert value not in str(raised.value)


def test_a_body_that_is_not_utf8_cannot_be_signed() -> None:
    with pytest.raises(SigningError, match="not UTF-8"):
        webhook_headers("ev-1:abc", b"\xff\xfe", "$HOOK_SECRET", {"HOOK_SECRET": SECRET})
