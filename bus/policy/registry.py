"""The policies one node enforces: the org layer and each tenant's, kept in step with Redis.

Every gateway and dispatcher holds a :class:`PolicyRegistry`. Its org layer is the pushed
``org`` version when there is one, else the policy files the node was started with (the
simple mode; their reloads keep working). A tenant with a pushed layer runs under
:func:`bus.policy.layers.compose` of the org layer and its own; every other tenant under the org
layer alone. A background task re-reads the current versions every :data:`POLL_S` seconds
(one HGETALL) and switches to new ones; a version that will not load leaves the node on its
last good one, says so in :attr:`errors` (``/readyz``), the log and
``hookbus_policy_load_failures_total``.

A node given trusted public keys (``HOOKBUS_POLICY_TRUSTED_KEYS``) activates a pushed version
only when its signature verifies by a key that may sign its layer (:mod:`bus.policy.signing`),
both when it becomes current and when a request names a version this node has not loaded; a
refused one is handled as one that does not load, counted in
``hookbus_policy_rejected_total{reason}`` instead.

A request carries the versions the gateway chose (``org|tenant``), and a dispatcher
evaluates it with exactly those: no event is answered by a mix of two versions.
"""

from __future__ import annotations

import asyncio
import collections
import logging
from collections.abc import Callable, Sequence
from typing import Any

import redis.asyncio as aioredis

from bus.errors import BusUnavailable, HookBusError, PolicyRejected
from bus.policy.layers import compose
from bus.policy.loading import Policy
from bus.policy.signing import Verifier
from bus.policy.store import ORG, PolicyStore, PolicyVersion, scope_for
from bus.redis.keys import Keyspace
from bus.runtime.metrics import Metrics, process_metrics
from bus.runtime.retry import BackgroundTask
from bus.runtime.trustedkeys import TrustedKey

logger = logging.getLogger("hookbus.policy")

#: Seconds between two reads of the current versions.
POLL_S = 0.25
#: Composed policies kept for requests still naming an older version.
MAX_COMPOSED = 256


class PolicyRegistry:
    """Org and tenant policies by version; see the module docstring."""

    def __init__(
        self,
        base: Policy,
        redis: aioredis.Redis | None = None,
        keys: Keyspace | None = None,
        on_change: Callable[[], None] | None = None,
        metrics: Metrics | None = None,
        trusted_keys: Sequence[TrustedKey] = (),
    ) -> None:
        self.metrics = metrics or process_metrics()
        self.verifier = Verifier(trusted_keys)
        self.keys = keys or Keyspace()
        self.store = PolicyStore(redis, self.keys) if redis is not None else None
        self._base = base
        self._versions: dict[str, PolicyVersion] = {}  # version id -> version (immutable, so cached)
        self._current: dict[str, str] = {}  # scope -> version id in force here
        self._composed: collections.OrderedDict[tuple[str, str], Policy] = collections.OrderedDict()
        #: scope -> why its newest version is not in force here.
        self.errors: dict[str, str] = {}
        #: scope -> why its newest version's signature was refused here (a part of ``errors``).
        self.refused: dict[str, str] = {}
        #: (version id, scope) -> the refusal, so a request naming it is not a read and a log line each.
        self._refusals: collections.OrderedDict[tuple[str, str], PolicyRejected] = collections.OrderedDict()
        self._on_change = on_change
        self._task = BackgroundTask(self._run, "hookbus-policy-registry")

    # -- what a request runs under ------------------------------------------------------------

    @property
    def base(self) -> Policy:
        return self._base

    def org_version(self) -> str:
        return self._current.get(ORG) or f"file:{self._base.revision}"

    def versions(self, tenant: str) -> tuple[str, str]:
        """``(org version, tenant version)`` in force for ``tenant`` ("" when it has no layer)."""
        return self.org_version(), self._current.get(scope_for(tenant), "")

    def for_tenant(self, tenant: str) -> tuple[Policy, str]:
        """The policy ``tenant`` runs under now, and its version label ``org|tenant``."""
        org_v, tenant_v = self.versions(tenant)
        return self._policy(org_v, tenant_v), f"{org_v}|{tenant_v}"

    async def resolve(self, tenant: str, label: str) -> Policy:
        """The policy of a version label a gateway chose (loading versions this node lacks)."""
        org_v, _, tenant_v = label.partition("|")
        if not label or (org_v.startswith("file:") and org_v != f"file:{self._base.revision}"):
            return self.for_tenant(tenant)[0]  # the files changed since; they are what there is
        try:
            for version, scope in ((org_v, ORG), (tenant_v, scope_for(tenant))):
                if version and not version.startswith("file:") and version not in self._versions:
                    if known := self._refusals.get((version, scope)):
                        logger.debug("policy %s of tenant %s was refused here: %s", label, tenant, known)
                        return self.for_tenant(tenant)[0]
                    await self._fetch(version, scope)
            return self._policy(org_v, tenant_v)
        except (HookBusError, KeyError) as exc:
            if isinstance(exc, PolicyRejected):
                self.metrics.policy_rejected.labels(exc.reason).inc()
            logger.warning("policy %s of tenant %s cannot be used (%s); using the current one", label, tenant, exc)
            return self.for_tenant(tenant)[0]

    def _policy(self, org_v: str, tenant_v: str) -> Policy:
        if not tenant_v and org_v.startswith("file:"):
            return self._base
        key = (org_v, tenant_v)
        policy = self._composed.get(key)
        if policy is None:
            org_files = self._base.files if org_v.startswith("file:") else self._versions[org_v].parsed()
            tenant_files = self._versions[tenant_v].parsed() if tenant_v else []
            policy = compose(org_files, tenant_files)
            self._composed[key] = policy
            while len(self._composed) > MAX_COMPOSED:
                self._composed.popitem(last=False)
        else:
            self._composed.move_to_end(key)
        return policy

    # -- keeping up --------------------------------------------------------------------------

    def set_base(self, policy: Policy) -> None:
        """The node's own files were reloaded (file watch or SIGHUP)."""
        self._base = policy
        self._composed.clear()
        self._report()

    async def start(self) -> None:
        if self.store is not None:
            try:
                await self.refresh()
            except BusUnavailable as exc:
                logger.warning("cannot read pushed policies yet: %s", exc)
            self._task.start()
        self._report()

    async def stop(self) -> None:
        await self._task.stop()

    async def refresh(self) -> bool:
        """Switch to the current versions in Redis; True when anything changed here."""
        assert self.store is not None
        changed = False
        for scope, version_id in (await self.store.current_ids()).items():
            if self._current.get(scope) == version_id:  # back to the version in force here: nothing is refused
                if self.errors.pop(scope, None) is not None:
                    self.refused.pop(scope, None)
                continue
            try:
                version = self._versions.get(version_id)
                if version is None:
                    version = await self._fetch(version_id, scope)
                else:
                    self.verifier.verify(version, scope)  # a version loaded for a request may be another scope's
                self._check(scope, version)
            except HookBusError as exc:
                if self.errors.get(scope, "").startswith(version_id):
                    continue
                self.errors[scope] = f"{version_id}: {exc}"
                self.refused.pop(scope, None)
                keeping = self._current.get(scope, "the node's files" if scope == ORG else "the org layer alone")
                if isinstance(exc, PolicyRejected):
                    self.metrics.policy_rejected.labels(exc.reason).inc()
                    self.refused[scope] = self.errors[scope]
                    logger.error(
                        "policy %s version %s refused (%s); keeping %s: %s", scope, version_id, exc.reason, keeping, exc
                    )
                else:
                    self.metrics.policy_load_failures.inc()
                    logger.error(
                        "policy %s version %s does not load here; keeping %s: %s", scope, version_id, keeping, exc
                    )
                continue
            self.errors.pop(scope, None)
            self.refused.pop(scope, None)
            self._current[scope] = version_id
            changed = True
            logger.info("policy %s is now version %s", scope, version_id)
        if changed:
            self._report()
            if self._on_change is not None:
                self._on_change()
        return changed

    def _check(self, scope: str, version: PolicyVersion) -> None:
        """Raise (PolicyError) unless ``version`` composes under the org layer in force."""
        if scope == ORG:
            compose(version.parsed(), [])
        else:
            org_v = self.org_version()
            compose(self._base.files if org_v.startswith("file:") else self._versions[org_v].parsed(), version.parsed())

    async def _fetch(self, version_id: str, scope: str) -> PolicyVersion:
        """Read a version and keep it, once it may be used for ``scope`` here (PolicyRejected if not)."""
        assert self.store is not None
        version = await self.store.get(version_id)
        if version is None:
            raise HookBusError(f"policy version {version_id} is not in Redis")
        try:
            self.verifier.verify(version, scope)
        except PolicyRejected as exc:
            self._refusals[(version_id, scope)] = exc
            while len(self._refusals) > MAX_COMPOSED:
                self._refusals.popitem(last=False)
            raise
        self._refusals.pop((version_id, scope), None)  # signed since
        self._versions[version_id] = version
        return version

    def signatures(self) -> dict[str, Any]:
        """The ``/readyz`` check of signed versions: whether they are verified, and what was refused."""
        if not self.verifier.enabled:
            return {
                "ok": True,
                "verified": False,
                "warning": "pushed policy versions are not verified (no HOOKBUS_POLICY_TRUSTED_KEYS)",
            }
        return {
            "ok": not self.refused,
            "verified": True,
            "trusted_keys": self.verifier.key_ids,
            "key_scopes": self.verifier.key_scopes,
            "refused": self.refused,
        }

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(POLL_S)
            try:
                await self.refresh()
            except BusUnavailable as exc:
                logger.debug("policy refresh: %s", exc)

    def _report(self) -> None:
        self.metrics.set_policy_revision(self.org_version(), "org")
        for scope, version_id in self._current.items():
            if scope != ORG:
                self.metrics.set_policy_revision(version_id, scope.removeprefix("tenant:"))


__all__ = ["POLL_S", "PolicyRegistry"]
