"""Standard Webhooks headers on http hook requests: ``webhook-id``, ``webhook-timestamp``, ``webhook-signature``.

Every async ``http`` delivery carries ``webhook-id`` and ``webhook-timestamp``. The id is the
event id and the handler id (:func:`webhook_id`): the same on every retry and every replay of
the delivery, so that a receiver de-duplicates on it (async delivery is at least once). A
handler with ``secret: $VAR`` also sends ``webhook-signature``: ``v1,`` + base64 of the
HMAC-SHA256 of ``{id}.{timestamp}.{body}``, computed by the ``standardwebhooks`` package, under
the secret the variable holds (``whsec_`` + base64, as Standard Webhooks secrets are written).
The variable is read from the process's environment when the request is sent; the secret is
never stored, logged or put in a reason. A blocking (non-async) ``http`` hook with a
``secret`` is signed the same way.
"""

from __future__ import annotations

import binascii
import time
from collections.abc import Mapping
from datetime import UTC, datetime

from standardwebhooks import Webhook
from standardwebhooks.webhooks import EmptyWebhookSecretError

from bus.errors import SigningError

#: The prefix Standard Webhooks secrets are written with (the rest is base64).
SECRET_PREFIX = "whsec_"  # noqa: S105 (a prefix, not a secret)


def webhook_id(event_id: str, handler_id: str) -> str:
    """The ``webhook-id`` of one handler's delivery of one event (stable across retries and replays)."""
    return f"{event_id}:{handler_id}"


def variable_name(reference: str) -> str:
    """``VAR`` of a ``$VAR`` / ``${VAR}`` reference (the schema has checked its form)."""
    return reference.lstrip("$").strip("{}")


def signer(reference: str, environ: Mapping[str, str]) -> Webhook:
    """The signer for the secret that ``reference`` (``$VAR``) names; SigningError when there is none."""
    name = variable_name(reference)
    value = environ.get(name, "").strip()
    if not value:
        raise SigningError(f"the hook's secret variable {name} is not set here; not sent unsigned")
    if not value.startswith(SECRET_PREFIX):
        raise SigningError(f"the secret in {name} is not a Standard Webhooks secret ('{SECRET_PREFIX}' + base64)")
    try:
        return Webhook(value)
    except (binascii.Error, ValueError, EmptyWebhookSecretError):
        raise SigningError(f"the secret in {name} is not valid base64 after '{SECRET_PREFIX}'") from None


def webhook_headers(
    message_id: str, payload: bytes, secret: str | None, environ: Mapping[str, str], now_s: float | None = None
) -> dict[str, str]:
    """The Standard Webhooks headers for sending ``payload``; signed when ``secret`` (``$VAR``) is given.

    Raises SigningError when a secret is named but cannot be used (the request must not go out unsigned).
    """
    stamp = int(time.time() if now_s is None else now_s)
    headers = {"webhook-id": message_id, "webhook-timestamp": str(stamp)}
    if secret is not None:
        try:
            body = payload.decode("utf-8")
        except UnicodeDecodeError:
            raise SigningError("the event is not UTF-8 text; it cannot be signed") from None
        when = datetime.fromtimestamp(stamp, tz=UTC)
        headers["webhook-signature"] = signer(secret, environ).sign(message_id, when, body)
    return headers


__all__ = ["SECRET_PREFIX", "SigningError", "signer", "variable_name", "webhook_headers", "webhook_id"]
