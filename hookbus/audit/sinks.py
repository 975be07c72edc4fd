"""Where ``hookbus audit follow`` delivers decision-log records: a JSON Lines file
(:mod:`hookbus.audit.jsonl`), a webhook (:mod:`hookbus.audit.webhook`) or an OpenTelemetry
logs endpoint (:mod:`hookbus.audit.otlp`).

A sink's :meth:`~hookbus.audit.delivery.Sink.deliver` returns once every item it was given is
accepted (written and synced; answered by the receiver, or, when the receiver refused it for
good, written to the dead-letter file), retrying with backoff until then, or raises
:class:`~hookbus.audit.delivery.Stopping` when the follower is asked to stop first. The
follower acknowledges the records only after that, so what a crash leaves unacknowledged is
delivered again: at least once, none dropped.
"""

from __future__ import annotations

from bus.errors import ConfigError
from bus.runtime.auditmetrics import SinkCounters
from hookbus.audit.delivery import DeadLetters, Item, Sink, Stopping
from hookbus.audit.jsonl import REMEMBERED, JsonlSink
from hookbus.audit.options import SinkOptions
from hookbus.audit.otlp import OtlpSink
from hookbus.audit.webhook import WEBHOOK_TYPE, HttpSink, load_secret

#: Records per request when ``--batch`` is not given, by sink kind.
DEFAULT_BATCH = {"jsonl": 100, "http": 100, "otlp": 500}


def open_sink(
    spec: str,
    options: SinkOptions | None = None,
    *,
    counters: SinkCounters | None = None,
    secret_env: str | None = None,
    allow_networks: tuple[str, ...] = (),
    timeout_s: float = 10.0,
) -> Sink:
    """``jsonl:PATH``, ``http:URL`` (``http:https://...`` too) or ``otlp:URL`` as a sink."""
    if options is None:
        options = SinkOptions(secret_env=secret_env, allow_networks=allow_networks, timeout_s=timeout_s)
    kind, sep, target = spec.partition(":")
    if not (sep and target and kind in DEFAULT_BATCH):
        raise ConfigError(f"--sink must be jsonl:PATH, http:URL or otlp:URL (got {spec!r})")
    batch = options.batch if options.batch is not None else DEFAULT_BATCH[kind]
    if batch < 1:
        raise ConfigError(f"--batch must be 1 or more (got {batch})")
    if options.secret_env and kind != "http":
        raise ConfigError(f"--secret-env signs webhooks; a {kind} sink has nothing to sign")
    if (options.rotate_bytes or options.rotate_every_s) and kind != "jsonl":
        raise ConfigError("--rotate-bytes and --rotate-every rotate a jsonl sink's file")
    if kind == "jsonl":
        if options.gzip:
            raise ConfigError("--gzip compresses requests; a jsonl sink sends none")
        return JsonlSink(target, batch=batch, rotate_bytes=options.rotate_bytes, rotate_every_s=options.rotate_every_s)
    dead_letters = DeadLetters(options.dead_letters or "hookbus-audit.dead-letters.jsonl")
    if kind == "http":
        return HttpSink(
            target,
            signer=load_secret(options.secret_env),
            allow_networks=options.allow_networks,
            timeout_s=options.timeout_s,
            batch=batch,
            gzip_body=options.gzip,
            max_batch_bytes=options.max_batch_bytes,
            dead_letters=dead_letters,
            counters=counters,
        )
    return OtlpSink(
        target,
        dead_letters=dead_letters,
        batch=batch,
        gzip_body=options.gzip,
        allow_networks=options.allow_networks,
        timeout_s=options.timeout_s,
        max_batch_bytes=options.max_batch_bytes,
        counters=counters,
    )


__all__ = [
    "DEFAULT_BATCH",
    "REMEMBERED",
    "WEBHOOK_TYPE",
    "HttpSink",
    "Item",
    "JsonlSink",
    "OtlpSink",
    "Sink",
    "SinkOptions",
    "Stopping",
    "load_secret",
    "open_sink",
]
