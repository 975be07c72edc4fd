"""Process settings, built once at start-up from ``HOOKBUS_*`` variables and flags, then passed down.

The policy file holds what the fleet shares (handlers, deadlines); these settings hold what
one process needs to run (where Redis is, which address to bind, tokens). Secrets (tokens,
the Redis password) never appear in a repr.
"""

from __future__ import annotations

import dataclasses
import hmac
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Final
from urllib.parse import urlsplit

from bus.errors import ConfigError
from bus.redis.keys import DEFAULT_PREFIX, Keyspace
from bus.redis.urls import CLUSTER_SCHEMES, SENTINEL_SYNTAX, cluster_url, is_sentinel_url, mask_url, parse_sentinel_url
from bus.runtime.replykey import ReplyKey
from bus.runtime.tracing import TraceSettings
from bus.runtime.trustedkeys import TrustedKey, parse_trusted_keys

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8787
DEFAULT_MAX_BODY_BYTES = 1 << 20
#: The async worker's CPU scheduling choices (``HOOKBUS_WORKER_CPU``).
WORKER_CPU: Final = ("normal", "idle")


def comma_list(given: str | Iterable[str] | None) -> list[str]:
    """The values of a comma-separated list, or of several (a flag or query parameter given more
    than once), in order: each stripped, empty ones dropped."""
    chunks = [given] if isinstance(given, str) else given or ()
    return [value.strip() for chunk in chunks for value in chunk.split(",") if value.strip()]


def parse_partitions(spec: str) -> tuple[int, ...]:
    """``0-3,6`` as ``(0, 1, 2, 3, 6)`` (a dispatcher's ``--partitions``)."""
    chosen: set[int] = set()
    try:
        for item in comma_list(spec):
            low, sep, high = item.partition("-")
            first, last = int(low), int(high) if sep else int(low)
            if first < 0 or last < first:
                raise ValueError(item)
            chosen.update(range(first, last + 1))
    except ValueError as exc:
        raise ConfigError(f"partitions {spec!r} are not a list of numbers and ranges like 0-3,6") from exc
    if not chosen:
        raise ConfigError("no partitions given (like 0-3,6)")
    return tuple(sorted(chosen))


class Tokens:
    """Bearer tokens, each mapped to a tenant; compared in constant time."""

    def __init__(self, token_to_tenant: Mapping[str, str]) -> None:
        self._pairs = [(t.encode(), tenant) for t, tenant in token_to_tenant.items()]

    def __bool__(self) -> bool:
        return bool(self._pairs)

    def __len__(self) -> int:
        return len(self._pairs)

    def __repr__(self) -> str:
        return f"Tokens(<{len(self._pairs)} tokens>)"

    def tenant_for(self, token: str) -> str | None:
        """The tenant of ``token``, or None. Every configured token is compared, always."""
        given = token.encode()
        found: str | None = None
        for known, tenant in self._pairs:
            if hmac.compare_digest(known, given):
                found = tenant
        return found

    @classmethod
    def parse(cls, spec: str) -> Tokens:
        """Parse ``tenant:token,tenant2:token2`` (also newline separated, ``#`` comments)."""
        pairs: dict[str, str] = {}
        for raw in spec.replace(",", "\n").splitlines():
            item = raw.strip()
            if not item or item.startswith("#"):
                continue
            tenant, sep, token = item.partition(":")
            if not sep or not tenant.strip() or not token.strip():
                raise ConfigError("tokens must look like 'tenant:token' (one per line or comma separated)")
            pairs[token.strip()] = tenant.strip()
        return cls(pairs)

    @classmethod
    def parse_admin(cls, spec: str) -> Tokens:
        """Parse org-admin tokens: ``token1,token2`` (also newline separated, ``#`` comments), tenant ``*``."""
        items = [raw.strip() for raw in spec.replace(",", "\n").splitlines()]
        return cls({item: "*" for item in items if item and not item.startswith("#")})


@dataclasses.dataclass(frozen=True)
class Settings:
    """Everything one hookbus process needs to run."""

    #: The bus's Redis; a ``redis+cluster://`` URL for a Redis Cluster (``HOOKBUS_REDIS_CLUSTER=1``).
    redis_url: str | None = None
    #: The async queue's Redis (arq needs a single Redis, or a ``redis+sentinel://`` URL: see
    #: :mod:`bus.redis.urls`); the bus's when not set.
    queue_redis_url: str | None = None
    #: The partitions this dispatcher consumes (``--partitions 0-3``); all of them when not set.
    dispatch_partitions: tuple[int, ...] | None = None
    key_prefix: str = DEFAULT_PREFIX
    policy_paths: tuple[str, ...] = ()
    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    tokens: Tokens = dataclasses.field(default_factory=lambda: Tokens({}))
    #: Org-admin tokens (``HOOKBUS_ADMIN_TOKENS``): read every tenant's decisions, run policy replays.
    admin_tokens: Tokens = dataclasses.field(default_factory=lambda: Tokens({}))
    #: Tenant-admin tokens (``HOOKBUS_TENANT_ADMIN_TOKENS``, ``tenant:token``): read their tenant's
    #: decisions and set or lift its freeze; they send no events.
    tenant_admin_tokens: Tokens = dataclasses.field(default_factory=lambda: Tokens({}))
    #: Approver tokens (``HOOKBUS_APPROVER_TOKENS``, ``tenant:token``): answer their tenant's approvals.
    approver_tokens: Tokens = dataclasses.field(default_factory=lambda: Tokens({}))
    #: Concurrent ``/v1/events/stream`` connections one token may hold.
    max_streams_per_token: int = 4
    #: Seconds a console replay or coverage report may read the decision log; past them it is partial.
    console_budget_s: float = 10.0
    insecure: bool = False
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    #: Bytes of events one tenant may have in flight at a gateway at once (0: no budget): past
    #: it, 429. Bounds the memory (Redis's and the gateway's) one tenant can hold.
    tenant_inflight_bytes: int = 64 * 1024 * 1024
    #: The same budget per token (0: none but its tenant's).
    token_inflight_bytes: int = 0
    #: The same budget per session (None: a quarter of the tenant's; 0: none but its token's and tenant's).
    session_inflight_bytes: int | None = None
    rate_limit_per_s: float = 0.0
    rate_limit_burst: int = 0
    #: Requests per second per token (0: no per-token limit); buckets shared in Redis.
    token_rate_limit_per_s: float = 0.0
    token_rate_limit_burst: int = 0
    #: Requests per second per session (None: a quarter of the tenant's; 0: no per-session limit).
    session_rate_limit_per_s: float | None = None
    session_rate_limit_burst: int = 0
    #: Accept tokens created with ``hookbus tokens create`` (kept in Redis), beside ``tokens``.
    managed_tokens: bool = False
    dispatch_batch: int = 64
    dispatch_concurrency: int = 256
    #: The most of those one tenant's events hold at once (None: half of them; 0: no cap), so that
    #: one tenant's slow handlers never hold every slot while another tenant's events wait.
    tenant_dispatch_slots: int | None = None
    #: The async worker's CPU scheduling: ``normal``, or ``idle`` (Linux ``SCHED_IDLE``: it runs
    #: on cores nothing else wants, and yields at once to a gateway, dispatcher or Redis that wakes).
    worker_cpu: str = "normal"
    claim_idle_ms: int = 5_000
    max_deliveries: int = 5
    state_dir: str = ".hookbus"
    #: The folder of ``hookbus audit archive`` (``HOOKBUS_ARCHIVE_DIR``): ``GET /v1/audit/query`` answers over it.
    archive_dir: str | None = None
    log_level: str = "info"
    log_format: str = "text"
    metrics_host: str = DEFAULT_HOST
    metrics_token: str | None = None
    #: Public keys a pushed policy version must be signed by to be activated, each with the layers
    #: it may sign (none: not verified).
    policy_trusted_keys: tuple[TrustedKey, ...] = ()
    #: The secret every gateway and dispatcher shares to authenticate replies (``HOOKBUS_REPLY_KEY``
    #: or ``HOOKBUS_REPLY_KEY_FILE``); None: a role started on its own refuses to start, roles
    #: embedded in one process share a random one (:mod:`bus.runtime.replykey`).
    reply_key: ReplyKey | None = None
    #: OpenTelemetry tracing (``OTEL_*``, ``HOOKBUS_TRACE_ALWAYS``): off unless an OTLP endpoint is named.
    tracing: TraceSettings = dataclasses.field(default_factory=TraceSettings)

    def __repr__(self) -> str:
        fields = []
        for f in dataclasses.fields(self):
            value: Any = getattr(self, f.name)
            if f.name in ("redis_url", "queue_redis_url") and value:
                value = mask_url(value)
            elif f.name == "metrics_token" and value:
                value = "***"
            elif f.name == "policy_trusted_keys":
                value = f"<{len(value)} keys>"
            elif f.name == "reply_key" and value is not None:
                value = "***"
            fields.append(f"{f.name}={value!r}")
        return f"Settings({', '.join(fields)})"

    @property
    def keys(self) -> Keyspace:
        return Keyspace(self.key_prefix)

    @property
    def queue_url(self) -> str:
        """The async queue's Redis: ``HOOKBUS_QUEUE_REDIS_URL``, else the bus's own (not a cluster's)."""
        if not self.redis_url and not self.queue_redis_url:
            raise ConfigError("no Redis: pass --redis-url or set HOOKBUS_REDIS_URL")
        return self.queue_url_for(self.redis_url or "")

    def queue_url_for(self, bus_url: str) -> str:
        """The async queue's Redis when the bus is at ``bus_url``; ConfigError for a cluster's."""
        url = self.queue_redis_url or bus_url
        if urlsplit(url).scheme in CLUSTER_SCHEMES:
            raise ConfigError(
                "the async queue (arq) cannot run on a Redis Cluster: set HOOKBUS_QUEUE_REDIS_URL "
                "to a single Redis (redis://, rediss:// or unix://) or to its Sentinels "
                f"({SENTINEL_SYNTAX})"
            )
        return url

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: Any) -> Settings:
        """Settings from ``HOOKBUS_*`` variables; non-None ``overrides`` (from flags) win."""
        env = os.environ if env is None else env
        values: dict[str, Any] = {}
        if url := env.get("HOOKBUS_REDIS_URL"):
            values["redis_url"] = url
        if url := env.get("HOOKBUS_QUEUE_REDIS_URL"):
            values["queue_redis_url"] = url
        if env.get("HOOKBUS_REDIS_CLUSTER", "").lower() in {"1", "true", "yes"}:
            values["redis_cluster"] = True
        if spec := env.get("HOOKBUS_DISPATCH_PARTITIONS"):
            values["dispatch_partitions"] = spec
        if prefix := env.get("HOOKBUS_KEY_PREFIX"):
            values["key_prefix"] = prefix
        if policy := env.get("HOOKBUS_CONFIG"):
            values["policy_paths"] = tuple(p for p in policy.split(os.pathsep) if p)
        if host := env.get("HOOKBUS_HOST"):
            values["host"] = host
        for name, key, kind in (
            ("port", "HOOKBUS_PORT", int),
            ("max_body_bytes", "HOOKBUS_MAX_BODY_BYTES", int),
            ("tenant_inflight_bytes", "HOOKBUS_TENANT_INFLIGHT_BYTES", int),
            ("rate_limit_per_s", "HOOKBUS_RATE_LIMIT", float),
            ("rate_limit_burst", "HOOKBUS_RATE_LIMIT_BURST", int),
            ("token_rate_limit_per_s", "HOOKBUS_TOKEN_RATE_LIMIT", float),
            ("token_rate_limit_burst", "HOOKBUS_TOKEN_RATE_LIMIT_BURST", int),
            ("token_inflight_bytes", "HOOKBUS_TOKEN_INFLIGHT_BYTES", int),
            ("session_inflight_bytes", "HOOKBUS_SESSION_INFLIGHT_BYTES", int),
            ("session_rate_limit_per_s", "HOOKBUS_SESSION_RATE_LIMIT", float),
            ("session_rate_limit_burst", "HOOKBUS_SESSION_RATE_LIMIT_BURST", int),
            ("dispatch_batch", "HOOKBUS_DISPATCH_BATCH", int),
            ("dispatch_concurrency", "HOOKBUS_DISPATCH_CONCURRENCY", int),
            ("tenant_dispatch_slots", "HOOKBUS_TENANT_DISPATCH_SLOTS", int),
            ("claim_idle_ms", "HOOKBUS_CLAIM_IDLE_MS", int),
            ("max_deliveries", "HOOKBUS_MAX_DELIVERIES", int),
            ("max_streams_per_token", "HOOKBUS_MAX_STREAMS_PER_TOKEN", int),
            ("console_budget_s", "HOOKBUS_CONSOLE_BUDGET_S", float),
        ):
            if key in env:
                try:
                    values[name] = kind(env[key])
                except ValueError as exc:
                    raise ConfigError(f"{key}={env[key]!r} is not a valid {kind.__name__}") from exc
        if state := env.get("HOOKBUS_STATE_DIR"):
            values["state_dir"] = state
        if archive := env.get("HOOKBUS_ARCHIVE_DIR", "").strip():
            values["archive_dir"] = archive
        if level := env.get("HOOKBUS_LOG_LEVEL"):
            values["log_level"] = level
        if log_format := env.get("HOOKBUS_LOG_FORMAT"):
            values["log_format"] = log_format.strip().lower()
        if worker_cpu := env.get("HOOKBUS_WORKER_CPU"):
            values["worker_cpu"] = worker_cpu.strip().lower()
        if metrics_host := env.get("HOOKBUS_METRICS_HOST"):
            values["metrics_host"] = metrics_host
        if metrics_token := env.get("HOOKBUS_METRICS_TOKEN"):
            values["metrics_token"] = metrics_token
        if env.get("HOOKBUS_INSECURE", "").lower() in {"1", "true", "yes"}:
            values["insecure"] = True
        if env.get("HOOKBUS_MANAGED_TOKENS", "").lower() in {"1", "true", "yes"}:
            values["managed_tokens"] = True
        tokens = env.get("HOOKBUS_TOKENS", "")
        if path := env.get("HOOKBUS_TOKENS_FILE"):
            try:
                tokens += "\n" + Path(path).read_text()
            except OSError as exc:
                raise ConfigError(f"cannot read HOOKBUS_TOKENS_FILE {path}: {exc.strerror}") from exc
        if tokens.strip():
            values["tokens"] = Tokens.parse(tokens)
        if admin := env.get("HOOKBUS_ADMIN_TOKENS", "").strip():
            values["admin_tokens"] = Tokens.parse_admin(admin)
        if tenant_admins := env.get("HOOKBUS_TENANT_ADMIN_TOKENS", "").strip():
            values["tenant_admin_tokens"] = Tokens.parse(tenant_admins)
        if approvers := env.get("HOOKBUS_APPROVER_TOKENS", "").strip():
            values["approver_tokens"] = Tokens.parse(approvers)
        if secret := env.get("HOOKBUS_REPLY_KEY", "").strip():
            values["reply_key"] = ReplyKey(secret)
        elif path := env.get("HOOKBUS_REPLY_KEY_FILE"):
            try:
                values["reply_key"] = ReplyKey(Path(path).read_bytes())
            except OSError as exc:
                raise ConfigError(f"cannot read HOOKBUS_REPLY_KEY_FILE {path}: {exc.strerror}") from exc
        if trusted := env.get("HOOKBUS_POLICY_TRUSTED_KEYS", "").strip():
            values["policy_trusted_keys"] = parse_trusted_keys(trusted)
        values["tracing"] = TraceSettings.from_env(env)
        values.update({k: v for k, v in overrides.items() if v is not None})
        if values.pop("redis_cluster", False) and values.get("redis_url"):
            values["redis_url"] = cluster_url(values["redis_url"])
        if isinstance(spec := values.get("dispatch_partitions"), str):
            values["dispatch_partitions"] = parse_partitions(spec)
        settings = cls(**values)
        settings.validate()
        return settings

    def require_reply_key(self) -> ReplyKey:
        """The reply key of a gateway or dispatcher started on its own: ConfigError when unset."""
        if self.reply_key is None:
            raise ConfigError(
                "no reply key: set HOOKBUS_REPLY_KEY (or HOOKBUS_REPLY_KEY_FILE) to the same secret on every "
                "gateway and dispatcher, e.g. python -c 'import secrets; print(secrets.token_hex(32))'"
            )
        return self.reply_key

    def validate(self) -> None:
        """Raise ConfigError for settings that cannot work."""
        if not 0 < self.port < 65536:
            raise ConfigError(f"port {self.port} is out of range")
        if self.max_body_bytes <= 0:
            raise ConfigError("max body size must be positive")
        if self.dispatch_batch <= 0 or self.dispatch_concurrency <= 0:
            raise ConfigError("dispatch batch and concurrency must be positive")
        if self.tenant_dispatch_slots is not None and self.tenant_dispatch_slots < 0:
            raise ConfigError(
                f"HOOKBUS_TENANT_DISPATCH_SLOTS must be 0 (no cap) or positive (got {self.tenant_dispatch_slots})"
            )
        if not 0 < self.console_budget_s < float("inf"):
            raise ConfigError("HOOKBUS_CONSOLE_BUDGET_S must be a positive number of seconds")
        if self.max_streams_per_token <= 0:
            raise ConfigError("HOOKBUS_MAX_STREAMS_PER_TOKEN must be positive")
        for value, name in (
            (self.tenant_inflight_bytes, "HOOKBUS_TENANT_INFLIGHT_BYTES"),
            (self.token_inflight_bytes, "HOOKBUS_TOKEN_INFLIGHT_BYTES"),
            (self.session_inflight_bytes, "HOOKBUS_SESSION_INFLIGHT_BYTES"),
            (self.rate_limit_per_s, "HOOKBUS_RATE_LIMIT"),
            (self.token_rate_limit_per_s, "HOOKBUS_TOKEN_RATE_LIMIT"),
            (self.session_rate_limit_per_s, "HOOKBUS_SESSION_RATE_LIMIT"),
        ):
            if value is not None and value < 0:
                raise ConfigError(f"{name} must be 0 (no limit) or positive (got {value})")
        if self.log_format not in ("text", "json"):
            raise ConfigError(f"log format {self.log_format!r} is not one of: text, json (HOOKBUS_LOG_FORMAT)")
        if self.worker_cpu not in WORKER_CPU:
            raise ConfigError(f"HOOKBUS_WORKER_CPU={self.worker_cpu!r} is not one of: {', '.join(WORKER_CPU)}")
        if self.redis_url and is_sentinel_url(self.redis_url):
            raise ConfigError(
                "HOOKBUS_REDIS_URL: a redis+sentinel:// URL names the async queue's Redis only "
                "(HOOKBUS_QUEUE_REDIS_URL); give the bus a redis://, rediss:// or unix:// URL"
            )
        if self.queue_redis_url:
            check_queue_url(self.queue_redis_url)


#: The schemes of a queue Redis's URL besides a Sentinel's (redis-py's own).
QUEUE_SCHEMES: Final = ("redis", "rediss", "unix")


def check_queue_url(url: str) -> None:
    """ConfigError (one line) for a queue Redis URL that cannot work: a cluster's, an unknown
    scheme, a malformed Sentinel URL."""
    scheme = url.partition("://")[0].lower() if "://" in url else ""
    if scheme in CLUSTER_SCHEMES:
        raise ConfigError(
            "HOOKBUS_QUEUE_REDIS_URL: the async queue (arq) cannot run on a Redis Cluster; "
            f"give a single Redis (redis://, rediss:// or unix://) or its Sentinels ({SENTINEL_SYNTAX})"
        )
    if is_sentinel_url(url):
        try:
            parse_sentinel_url(url)
        except ConfigError as exc:
            raise ConfigError(f"HOOKBUS_QUEUE_REDIS_URL is {exc}") from None
    elif scheme not in QUEUE_SCHEMES:
        raise ConfigError(
            f"HOOKBUS_QUEUE_REDIS_URL: {scheme or 'no'} scheme; a queue Redis is redis://, rediss://, "
            f"unix:// or its Sentinels ({SENTINEL_SYNTAX})"
        )


__all__ = [
    "CLUSTER_SCHEMES",
    "DEFAULT_HOST",
    "DEFAULT_PORT",
    "QUEUE_SCHEMES",
    "Settings",
    "Tokens",
    "check_queue_url",
    "parse_partitions",
    "parse_trusted_keys",
]
