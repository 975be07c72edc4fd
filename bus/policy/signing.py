"""Signed policy versions: Ed25519 keys, what a signature covers, and the check every node runs.

``hookbus policy keygen`` makes a key pair: the private key as a PKCS#8 PEM file (mode 0600)
and the public key as one line, ``ed25519:<base64 of its 32 bytes>``. A node trusts it as
``HOOKBUS_POLICY_TRUSTED_KEYS`` lists it, with the layers it may sign (``@org``, ``@tenant``,
``@tenant:<name>``: see :mod:`bus.runtime.trustedkeys`; parsed once at start).
``hookbus policy push --sign KEYFILE`` stores the signature and the signing key's id beside
the version's files.

What is signed (:func:`signed_bytes`) is the version's scope (``org`` or ``tenant:<name>``),
its id (the content hash of its files) and every file's name and text in order, each framed
by its length, after a fixed context line: editing a file in Redis, moving a version (or its
signature) to another id or to another tenant's layer makes the signature fail. Author, time
and message describe the push and are not signed.

A node with trusted keys activates a version only when :meth:`Verifier.verify` passes: it is
signed, by a trusted key, the signature verifies, the version belongs to the scope it is made
current for, and that scope is one the key may sign. A node without trusted keys verifies
nothing (signing is opt-in).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from bus.errors import ConfigError, PolicyRejected
from bus.runtime.trustedkeys import KeyScope, TrustedKey, public_key_text

#: The first bytes of every signed message: a signature over anything else never verifies here.
CONTEXT = b"hookbus policy version v1\n"


def key_id(public: bytes) -> str:
    """A public key's short name: the first 16 hex digits of the SHA-256 of its 32 bytes."""
    return hashlib.sha256(public).hexdigest()[:16]


def raw_public(key: Ed25519PrivateKey) -> bytes:
    return key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def generate(out: Path) -> bytes:
    """Write a new private key to ``out`` (0600, refusing to replace a file); return its public key."""
    key = Ed25519PrivateKey.generate()
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    try:
        fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        raise ConfigError(f"{out} exists; keygen does not replace a key (choose another --out)") from None
    except OSError as exc:
        raise ConfigError(f"cannot write {out}: {exc.strerror or exc}") from exc
    with os.fdopen(fd, "wb") as file:
        file.write(pem)
    return raw_public(key)


def load_private_key(path: str | Path) -> Ed25519PrivateKey:
    """The Ed25519 private key in the PEM file at ``path`` (ConfigError, one line, otherwise)."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read signing key {path}: {exc.strerror or exc}") from exc
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError) as exc:
        raise ConfigError(
            f"{path} is not an unencrypted PEM private key (make one with 'hookbus policy keygen')"
        ) from exc
    if not isinstance(key, Ed25519PrivateKey):
        raise ConfigError(f"{path} is not an Ed25519 key (make one with 'hookbus policy keygen')")
    return key


def _frame(part: bytes) -> bytes:
    return len(part).to_bytes(8, "big") + part


def signed_bytes(scope: str, version_id: str, files: Sequence[tuple[str, str]]) -> bytes:
    """The exact message a version's signature covers (see the module docstring)."""
    parts = [CONTEXT, _frame(scope.encode()), _frame(version_id.encode()), len(files).to_bytes(8, "big")]
    for name, text in files:
        parts += [_frame(name.encode()), _frame(text.encode())]
    return b"".join(parts)


def sign(key: Ed25519PrivateKey, scope: str, version_id: str, files: Sequence[tuple[str, str]]) -> tuple[str, str]:
    """``(signature as base64, signing key's id)`` of a version."""
    signature = key.sign(signed_bytes(scope, version_id, files))
    return base64.b64encode(signature).decode(), key_id(raw_public(key))


class Signed(Protocol):
    """What a signature is checked on (a :class:`bus.policy.store.PolicyVersion`)."""

    @property
    def id(self) -> str: ...
    @property
    def scope(self) -> str: ...
    @property
    def files(self) -> tuple[tuple[str, str], ...]: ...
    @property
    def signature(self) -> str: ...
    @property
    def signed_by(self) -> str: ...


class Verifier:
    """Checks versions against the trusted keys, each limited to its scope; none: checks nothing."""

    def __init__(self, trusted: Sequence[TrustedKey] = ()) -> None:
        self._keys = {key_id(k.public): Ed25519PublicKey.from_public_bytes(k.public) for k in trusted}
        self._scopes: dict[str, KeyScope] = {}
        for k in trusted:
            self._scopes[key_id(k.public)] = self._scopes.get(key_id(k.public), KeyScope()) | k.scope

    @property
    def enabled(self) -> bool:
        return bool(self._keys)

    @property
    def key_ids(self) -> list[str]:
        return list(self._keys)

    @property
    def key_scopes(self) -> dict[str, str]:
        """Each trusted key's id and the layers it may sign, as ``HOOKBUS_POLICY_TRUSTED_KEYS`` writes them."""
        return {kid: str(scope) for kid, scope in self._scopes.items()}

    def verify(self, version: Signed, scope: str) -> None:
        """Raise PolicyRejected unless ``version`` may be made current for ``scope`` here."""
        if not self._keys:
            return
        if version.scope != scope:
            raise PolicyRejected("wrong_scope", f"version {version.id} belongs to {version.scope}, not {scope}")
        if not version.signature:
            raise PolicyRejected("unsigned", f"version {version.id} is not signed (push it with --sign)")
        public = self._keys.get(version.signed_by)
        if public is None:
            raise PolicyRejected(
                "untrusted_key",
                f"version {version.id} is signed by key {version.signed_by[:40] or '?'}, which is not trusted",
            )
        try:
            signature = base64.b64decode(version.signature, validate=True)
            public.verify(signature, signed_bytes(version.scope, version.id, version.files))
        except (InvalidSignature, binascii.Error, ValueError):
            raise PolicyRejected(
                "bad_signature",
                f"the signature of version {version.id} does not verify (changed since it was signed?)",
            ) from None
        allowed = self._scopes[version.signed_by]
        if not allowed.allows(version.scope):
            raise PolicyRejected(
                "outside_key_scope",
                f"version {version.id} of {version.scope} is signed by key {version.signed_by}, "
                f"which may sign only {allowed}",
            )


__all__ = [
    "CONTEXT",
    "PolicyRejected",
    "Signed",
    "Verifier",
    "generate",
    "key_id",
    "load_private_key",
    "public_key_text",
    "sign",
    "signed_bytes",
]
