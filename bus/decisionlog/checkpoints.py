"""Signed checkpoints of the decision log's hash chains (:mod:`bus.decisionlog.chain`).

Whoever can write to Redis can rebuild a hash chain from any record on, hashes and head
included: the chain alone shows tampering only against a copy kept elsewhere. A checkpoint
is such a copy, made unforgeable: a partition's chain head (sequence number and hash) and
the time, signed with an Ed25519 key that never reaches Redis or the decision path
(``hookbus policy keygen`` makes one, as for signed policies). ``hookbus audit verify --live
--sign KEYFILE`` checks the live log and, when every chain holds, appends one checkpoint per
partition to ``{p}{tN}:checkpoints``; run every T seconds, it bounds what can be rewritten
unseen to the last T seconds. ``hookbus audit verify --live --trust ed25519:...`` checks
every checkpoint kept: its signature is a trusted key's, and the record it names, while the
log keeps it, still has the hash it signed.

What is signed (:meth:`Checkpoint.signed_bytes`) is a fixed context line, then the key
prefix, the partition, the sequence number, the hash and the time, one per line: a
checkpoint moved to another partition, bus or record does not verify.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, Final

import redis.asyncio as aioredis
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from bus.errors import ConfigError
from bus.policy.signing import key_id, raw_public
from bus.redis.keys import Keyspace
from bus.runtime.trustedkeys import TRUSTED_KEY_PREFIX

#: The first bytes of every signed checkpoint.
CONTEXT: Final = b"hookbus audit checkpoint v1\n"
#: Checkpoints kept per partition (the oldest go first).
CHECKPOINTS_MAXLEN: Final = 100_000


@dataclasses.dataclass(frozen=True, slots=True)
class Checkpoint:
    """One partition's chain head, signed."""

    partition: int
    seq: int
    hash: str
    at_ms: int
    key_id: str
    signature: str

    def signed_bytes(self, prefix: str) -> bytes:
        return CONTEXT + f"{prefix}\n{self.partition}\n{self.seq}\n{self.hash}\n{self.at_ms}".encode()

    def fields(self) -> dict[str, str | int]:
        return {
            "p": self.partition,
            "seq": self.seq,
            "hash": self.hash,
            "ts": self.at_ms,
            "key": self.key_id,
            "sig": self.signature,
        }

    @classmethod
    def from_fields(cls, fields: Mapping[bytes, bytes]) -> Checkpoint | None:
        """A checkpoint from its stream entry, or None when the entry is not one."""
        try:
            return cls(
                int(fields[b"p"]),
                int(fields[b"seq"]),
                fields[b"hash"].decode(),
                int(fields[b"ts"]),
                fields[b"key"].decode(),
                fields[b"sig"].decode(),
            )
        except (KeyError, ValueError):
            return None


def sign_checkpoint(
    key: Ed25519PrivateKey, prefix: str, partition: int, head: tuple[int, str], at_ms: int
) -> Checkpoint:
    """A checkpoint of ``partition``'s chain head ``(seq, hash)``, signed with ``key``."""
    unsigned = Checkpoint(partition, head[0], head[1], at_ms, key_id(raw_public(key)), "")
    signature = base64.b64encode(key.sign(unsigned.signed_bytes(prefix))).decode()
    return dataclasses.replace(unsigned, signature=signature)


def parse_public_keys(texts: Sequence[str]) -> dict[str, Ed25519PublicKey]:
    """Trusted keys (``ed25519:<base64 of 32 bytes>``, as ``hookbus policy keygen`` prints them; a
    policy scope after ``@`` is ignored) by key id; ConfigError, one line, for one that is not such a key."""
    keys: dict[str, Ed25519PublicKey] = {}
    for given in texts:
        text = given.partition("@")[0]
        try:
            raw = base64.b64decode(text.strip().removeprefix(TRUSTED_KEY_PREFIX), validate=True)
            if not text.strip().startswith(TRUSTED_KEY_PREFIX) or len(raw) != 32:
                raise ValueError
        except (ValueError, binascii.Error):
            shown = given if len(given) <= 24 else given[:24] + "..."
            raise ConfigError(
                f"--trust {shown!r} is not a public key like '{TRUSTED_KEY_PREFIX}<base64 of 32 bytes>'"
            ) from None
        keys[key_id(raw)] = Ed25519PublicKey.from_public_bytes(raw)
    return keys


def checkpoint_problem(checkpoint: Checkpoint, trusted: Mapping[str, Ed25519PublicKey], prefix: str) -> str | None:
    """Why ``checkpoint`` does not verify with ``trusted`` keys, or None when it does."""
    key = trusted.get(checkpoint.key_id)
    if key is None:
        return f"it is signed by key {checkpoint.key_id}, which is not trusted (--trust)"
    try:
        key.verify(base64.b64decode(checkpoint.signature, validate=True), checkpoint.signed_bytes(prefix))
    except (InvalidSignature, ValueError, binascii.Error):
        return "its signature does not verify"
    return None


async def append_checkpoint(redis: aioredis.Redis, keys: Keyspace, checkpoint: Checkpoint) -> None:
    fields: Any = checkpoint.fields()
    await redis.xadd(keys.chain_checkpoints(checkpoint.partition), fields, maxlen=CHECKPOINTS_MAXLEN, approximate=True)


async def read_checkpoints(
    redis: aioredis.Redis, keys: Keyspace, partition: int
) -> list[tuple[str, Checkpoint | None]]:
    """Every checkpoint kept of ``partition``, oldest first: (entry id, checkpoint; None for an entry not one)."""
    entries = await redis.xrange(keys.chain_checkpoints(partition))
    return [(entry_id.decode(), Checkpoint.from_fields(fields)) for entry_id, fields in entries]


async def chain_head(redis: aioredis.Redis, keys: Keyspace, partition: int) -> tuple[int, str] | None:
    """A partition's chain head ``(seq, hash)``, or None before its first linked record."""
    stored = await redis.get(keys.decision_chain(partition))
    seq, _, digest = (stored or b"").decode().partition(":")
    return (int(seq), digest) if seq.isdigit() and digest else None


__all__ = [
    "CHECKPOINTS_MAXLEN",
    "CONTEXT",
    "Checkpoint",
    "append_checkpoint",
    "chain_head",
    "checkpoint_problem",
    "parse_public_keys",
    "read_checkpoints",
    "sign_checkpoint",
]
