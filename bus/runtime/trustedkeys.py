"""Trusted policy-signing keys and the layers each one may sign (``HOOKBUS_POLICY_TRUSTED_KEYS``).

The variable lists keys, comma-separated, each as ``ed25519:<base64 of its 32 bytes>@<scope>``.
A scope is one or more of these, joined by ``+``:

- ``org``: the org layer (which every tenant runs under);
- ``tenant``: any tenant's layer;
- ``tenant:<name>``: that tenant's layer.

So ``ed25519:...@tenant:acme+tenant:beta`` is a key two teams share, and ``ed25519:...@org+tenant``
a platform key that signs every layer. A key listed twice may sign what either entry allows.
A key without a scope is refused at start: it once meant "every layer", which is not what a
key handed to one team for its own layer may mean.
"""

from __future__ import annotations

import base64
import dataclasses
from typing import Final

from bus.errors import ConfigError

#: How a trusted policy-signing public key is written.
TRUSTED_KEY_PREFIX: Final = "ed25519:"
#: The layer names a scope is written in, as :mod:`bus.policy.store` names layers.
ORG_LAYER: Final = "org"
TENANT_LAYER: Final = "tenant"
#: Characters a tenant named in a scope cannot hold (they separate entries and scopes).
_SEPARATORS: Final = frozenset("+@, \t\r\n")
VARIABLE: Final = "HOOKBUS_POLICY_TRUSTED_KEYS"


@dataclasses.dataclass(frozen=True, slots=True)
class KeyScope:
    """The layers one key may sign: the org layer, any tenant's, or the named tenants'."""

    org: bool = False
    any_tenant: bool = False
    tenants: frozenset[str] = frozenset()

    def allows(self, layer: str) -> bool:
        """Whether a version of ``layer`` (``org`` or ``tenant:<name>``) may be signed by this key."""
        if layer == ORG_LAYER:
            return self.org
        kind, sep, tenant = layer.partition(":")
        return kind == TENANT_LAYER and bool(sep) and bool(tenant) and (self.any_tenant or tenant in self.tenants)

    def __or__(self, other: KeyScope) -> KeyScope:
        any_tenant = self.any_tenant or other.any_tenant
        return KeyScope(self.org or other.org, any_tenant, frozenset() if any_tenant else self.tenants | other.tenants)

    def __str__(self) -> str:
        parts = [ORG_LAYER] if self.org else []
        if self.any_tenant:
            parts.append(TENANT_LAYER)
        else:
            parts += [f"{TENANT_LAYER}:{name}" for name in sorted(self.tenants)]
        return "+".join(parts)

    @classmethod
    def parse(cls, text: str, where: str = VARIABLE) -> KeyScope:
        """``org``, ``tenant``, ``tenant:<name>``, joined by ``+`` (ConfigError, one line naming
        ``where``, otherwise)."""
        scope = cls()
        for part in text.split("+"):
            kind, sep, tenant = part.partition(":")
            if part == ORG_LAYER:
                scope |= cls(org=True)
            elif part == TENANT_LAYER:
                scope |= cls(any_tenant=True)
            elif kind == TENANT_LAYER and sep and tenant and tenant != "*" and not _SEPARATORS & set(tenant):
                scope |= cls(tenants=frozenset([tenant]))
            else:
                raise ConfigError(
                    f"{where}: scope {part!r} is not org, tenant (any tenant) or tenant:NAME "
                    "(several joined by '+', like 'org+tenant')"
                )
        return scope


#: What a key may sign when its entry names every layer (``org+tenant``).
EVERY_LAYER: Final = KeyScope(org=True, any_tenant=True)


@dataclasses.dataclass(frozen=True, slots=True)
class TrustedKey:
    """One trusted Ed25519 public key (its raw 32 bytes) and the layers it may sign."""

    public: bytes
    scope: KeyScope

    def __str__(self) -> str:
        """The entry as :data:`VARIABLE` takes it: ``ed25519:<base64>@<scope>``."""
        return f"{public_key_text(self.public)}@{self.scope}"


def public_key_text(public: bytes) -> str:
    """``ed25519:<base64>``: a public key as ``hookbus policy keygen`` prints it (no scope)."""
    return TRUSTED_KEY_PREFIX + base64.b64encode(public).decode()


def _public(text: str) -> bytes:
    try:
        if not text.startswith(TRUSTED_KEY_PREFIX):
            raise ValueError
        raw = base64.b64decode(text.removeprefix(TRUSTED_KEY_PREFIX), validate=True)
        if len(raw) != 32:
            raise ValueError
    except ValueError:
        shown = text if len(text) <= 24 else text[:24] + "..."
        raise ConfigError(
            f"{VARIABLE}: {shown!r} is not an Ed25519 public key like "
            f"'{TRUSTED_KEY_PREFIX}<base64 of 32 bytes>' (as 'hookbus policy keygen' prints)"
        ) from None
    return raw


def parse_trusted_keys(spec: str) -> tuple[TrustedKey, ...]:
    """:data:`VARIABLE`'s comma-separated entries as trusted keys, a key listed twice merged into
    one; ConfigError (one line) for a bad entry or for none."""
    found: dict[bytes, KeyScope] = {}
    for item in (part.strip() for part in spec.split(",")):
        if not item:
            continue
        key_text, sep, scope_text = item.partition("@")
        raw = _public(key_text.strip())
        if not sep:
            shown = key_text if len(key_text) <= 24 else key_text[:24] + "..."
            raise ConfigError(
                f"{VARIABLE}: key {shown!r} has no scope: append @org, @tenant or @tenant:NAME to say which "
                "policy layers it may sign (@org+tenant for every layer, as before)"
            )
        found[raw] = found.get(raw, KeyScope()) | KeyScope.parse(scope_text.strip())
    if not found:
        raise ConfigError(f"{VARIABLE} is set but names no key (unset it to verify nothing)")
    return tuple(TrustedKey(raw, scope) for raw, scope in found.items())


__all__ = [
    "EVERY_LAYER",
    "ORG_LAYER",
    "TENANT_LAYER",
    "TRUSTED_KEY_PREFIX",
    "VARIABLE",
    "KeyScope",
    "TrustedKey",
    "parse_trusted_keys",
    "public_key_text",
]
