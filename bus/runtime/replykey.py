"""Authenticated replies: the secret gateways and dispatchers share, and the MAC it makes.

Anyone who can write to the bus's Redis can publish on a gateway's reply channel, or write a
settled reply into an event's outcome key. So every reply carries a MAC (keyed BLAKE2b) that
only a holder of the reply key can make, and a gateway takes no reply that does not verify:
it drops it, counts it (``hookbus_replies_rejected_total``) and goes on waiting for the real
one, answering at the deadline as it would for a lost reply.

The MAC covers the request as the gateway appended it (its metadata, which names the event
id, tenant, policy versions and reply channel, and the hook input, each with its length)
and then the reply's JSON. A reply made for one event therefore does not verify for any
other, nor for the same event id on another gateway, nor for a request someone else appended
under a pending event's id: the dispatcher signs what it evaluated, the gateway checks it
against what it sent. A gateway hashes its request once, when it appends it
(:meth:`ReplyKey.bind`), and per reply copies that state and hashes the reply's bytes.

On the wire a sealed reply is the MAC in hex (:data:`MAC_CHARS` characters) followed by the
reply's JSON; the replies of one message are separated by newlines (JSON written by orjson
never holds a raw one). The key never reaches Redis, a log line or a repr.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from typing import Final

from bus.errors import ConfigError

#: The length of a sealed reply's MAC, in hex characters.
MAC_CHARS: Final = 64
#: The shortest secret accepted, in bytes (its UTF-8 encoding): 32 random bytes in hex is 64.
MIN_SECRET_BYTES: Final = 32
_DIGEST_BYTES: Final = MAC_CHARS // 2
_PERSON: Final = b"hookbus-replies"


def new_secret() -> str:
    """A fresh random reply key, as text (what ``HOOKBUS_REPLY_KEY`` holds)."""
    return secrets.token_hex(32)


class ReplyKey:
    """The reply key (``HOOKBUS_REPLY_KEY``): makes and checks the MACs of replies."""

    __slots__ = ("_keyed",)

    def __init__(self, secret: str | bytes) -> None:
        raw = secret.encode() if isinstance(secret, str) else secret
        if len(raw.strip()) < MIN_SECRET_BYTES:
            raise ConfigError(
                f"the reply key (HOOKBUS_REPLY_KEY) must be at least {MIN_SECRET_BYTES} characters; "
                "make one with: python -c 'import secrets; print(secrets.token_hex(32))'"
            )
        # Any length in, a 32-byte BLAKE2b key out (a BLAKE2b key holds at most 64 bytes).
        key = hashlib.blake2b(raw.strip(), digest_size=32, person=b"hookbus-replykey").digest()
        # The MAC's state once the key is in it (a keyed BLAKE2b hashes the key as its first
        # block): each request's MAC starts from a copy, not from the key again.
        self._keyed = hashlib.blake2b(key=key, digest_size=_DIGEST_BYTES, person=_PERSON)

    def __repr__(self) -> str:
        return "ReplyKey(***)"

    def bind(self, meta: bytes, payload: bytes) -> hashlib.blake2b:
        """The MAC's state over a request's metadata and hook input (the ``m`` and ``p`` of its
        stream entry), for :meth:`seal` and :func:`verify` to complete with a reply."""
        state = self._keyed.copy()
        state.update(len(meta).to_bytes(8, "big"))
        state.update(meta)
        state.update(len(payload).to_bytes(8, "big"))
        state.update(payload)
        return state

    def seal(self, meta: bytes, payload: bytes, reply: bytes) -> bytes:
        """``reply`` (a reply's JSON) as sent: its MAC for this request, in hex, then itself."""
        state = self.bind(meta, payload)
        state.update(reply)
        return state.hexdigest().encode() + reply


def verify(binding: hashlib.blake2b, sealed: bytes) -> bool:
    """Whether ``sealed`` is a reply made with the key of ``binding`` for its request."""
    state = binding.copy()
    state.update(memoryview(sealed)[MAC_CHARS:])
    return hmac.compare_digest(state.hexdigest().encode(), sealed[:MAC_CHARS])


def reply_json(sealed: bytes) -> memoryview:
    """The reply's JSON in ``sealed`` (read it only once :func:`verify` says so)."""
    return memoryview(sealed)[MAC_CHARS:]


_process_secret: str | None = None


def process_secret() -> str:
    """The reply key of the roles that run inside this process when their settings name none
    (a gateway and dispatchers embedded in one program, or a test's): random, made once."""
    global _process_secret
    if _process_secret is None:
        _process_secret = new_secret()
    return _process_secret


def key_or_process(key: ReplyKey | None) -> ReplyKey:
    """``key``, or the key of this process's embedded roles (:func:`process_secret`)."""
    return key if key is not None else ReplyKey(process_secret())


__all__ = [
    "MAC_CHARS",
    "MIN_SECRET_BYTES",
    "ReplyKey",
    "key_or_process",
    "new_secret",
    "process_secret",
    "reply_json",
    "verify",
]
