"""Composing an organisation's policy layer with a tenant's.

The org layer (a pushed org version, or the policy files a node was started with) applies
to every tenant. A tenant layer adds its own hooks. As with Claude Code's settings layers,
hooks add up and never override: an org handler always runs, and a tenant handler equal to
an org one runs once. Platform settings (``hookbus:``) of the tenant layer override the
org's key by key, unless the org sets ``hookbus.orgLocked: true``; then only the keys the
org lists in ``hookbus.tenantOverrides`` may be set by a tenant, and a tenant can neither
disable hooks (``disableAllHooks``) nor shadow the whole policy: no tenant can weaken an org
hook.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from bus.policy.loading import Policy, PolicyFile, merge_policy

_ORG_ONLY = ("orgLocked", "tenantOverrides", "streams")


def locked_keys(org: Sequence[PolicyFile]) -> tuple[bool, frozenset[str]]:
    """Whether the org layer is locked, and the platform keys tenants may still set."""
    locked, overrides = False, frozenset[str]()
    for f in org:
        if "orgLocked" in f.platform:
            locked = bool(f.platform["orgLocked"])
        if "tenantOverrides" in f.platform:
            overrides = frozenset(str(key) for key in f.platform["tenantOverrides"] or ())
    return locked, overrides


def _restrict(tenant_file: PolicyFile, allowed: frozenset[str]) -> PolicyFile:
    """A tenant file as a locked org sees it: its weakening settings dropped, with a note."""
    dropped = sorted(key for key in tenant_file.platform if key not in allowed)
    notes = list(tenant_file.notes)
    if dropped:
        notes.append(f"{tenant_file.source}: hookbus.{', hookbus.'.join(dropped)} ignored: the org layer is locked")
    if tenant_file.disable_all_hooks:
        notes.append(f"{tenant_file.source}: disableAllHooks ignored: the org layer is locked")
    return dataclasses.replace(
        tenant_file,
        platform={key: value for key, value in tenant_file.platform.items() if key in allowed},
        disable_all_hooks=None,
        notes=notes,
    )


def compose(org: Sequence[PolicyFile], tenant: Sequence[PolicyFile]) -> Policy:
    """The policy one tenant runs under: the org layer, then the tenant's (PolicyError if bad)."""
    locked, allowed = locked_keys(org)
    tenant_files = [_restrict(f, allowed) if locked else f for f in tenant]
    # A tenant can neither lock nor unlock the org.
    tenant_files = [
        dataclasses.replace(f, platform={k: v for k, v in f.platform.items() if k not in _ORG_ONLY})
        for f in tenant_files
    ]
    return merge_policy([*org, *tenant_files])


__all__ = ["compose", "locked_keys"]
