"""``hookbus tokens ...``, ``hookbus policy push|versions|show|diff|rollback`` and ``policy keygen``.

The first two work on the platform's Redis (``--redis-url``, ``$HOOKBUS_REDIS_URL`` or the
embedded Redis of a ``hookbus up`` in ``--state-dir``); see :mod:`bus.redis.tokens` and
:mod:`bus.policy.store` for what is stored. ``policy keygen`` makes the key pair that
``policy push --sign`` signs with (:mod:`bus.policy.signing`), and needs no Redis.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import functools
import json
import operator
import os
import sys
from collections.abc import Sequence
from pathlib import Path

import httpx

from bus.errors import ConfigError
from bus.policy.signing import generate, key_id, load_private_key, raw_public
from bus.policy.store import PolicyStore, diff, scope_for
from bus.redis.connection import connect
from bus.redis.keys import Keyspace
from bus.redis.tokens import TokenStore, parse_duration_s
from bus.runtime.settings import Settings
from bus.runtime.trustedkeys import KeyScope, TrustedKey

POLICY_ACTIONS = ("push", "versions", "show", "diff", "rollback", "keygen")
#: How long ``tokens create`` waits for each gateway's ``/readyz``.
_READYZ_TIMEOUT_S = 1.0


def _when(ms: int | None) -> str:
    if ms is None:
        return "-"
    return datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def _gateway_urls(args: argparse.Namespace) -> list[str]:
    """The gateways this command can know of: the ``hookbus up`` of the state folder, ``$HOOKBUS_URL``."""
    from hookbus.platform.state import running

    urls = []
    state = running(Settings.from_env(state_dir=getattr(args, "state_dir", None)).state_dir)
    if state and isinstance(state.get("url"), str):
        urls.append(state["url"])
    if hook_url := os.environ.get("HOOKBUS_URL"):
        base = hook_url.partition("?")[0].rstrip("/")
        urls.append(base.removesuffix("/v1/hooks"))
    return list(dict.fromkeys(url.rstrip("/") for url in urls))


async def _announces_managed_tokens(client: httpx.AsyncClient, url: str) -> bool | None:
    """What the gateway at ``url`` says in ``/readyz`` (None: no answer)."""
    try:
        body = (await client.get(f"{url}/readyz")).json()
    except (httpx.HTTPError, ValueError):
        return None
    return isinstance(body, dict) and body.get("managed_tokens") is True


async def managed_tokens_warning(urls: list[str]) -> str | None:
    """The warning for a new managed token when no gateway of ``urls`` says it accepts one."""
    async with httpx.AsyncClient(timeout=_READYZ_TIMEOUT_S) as client:
        answers = await asyncio.gather(*(_announces_managed_tokens(client, url) for url in urls))
    if any(answers):
        return None
    refusing = [url for url, answer in zip(urls, answers, strict=True) if answer is False]
    if refusing:
        where = f"the gateway at {', '.join(refusing)} does not accept managed tokens"
    else:
        where = "found no running gateway that accepts managed tokens (none answered at --state-dir or $HOOKBUS_URL)"
    return f"hookbus: warning: {where}; gateways accept them only with HOOKBUS_MANAGED_TOKENS=1"


async def _tokens(args: argparse.Namespace, redis_url: str, keys: Keyspace) -> int:
    redis = connect(redis_url)
    try:
        store = TokenStore(redis, keys, redis_url)
        if args.tokens_command == "create":
            expires_s = parse_duration_s(args.expires) if args.expires else None
            token, info = await store.create(args.tenant, args.name, expires_s)
            print(token)
            print(
                f"hookbus: token {info.id} for tenant {info.tenant} (expires {_when(info.expires_ms)}); "
                "it is shown only now",
                file=sys.stderr,
            )
            if warning := await managed_tokens_warning(_gateway_urls(args)):
                print(warning, file=sys.stderr)
            return 0
        if args.tokens_command == "list":
            found = await store.list(args.tenant)
            if args.json:
                print(json.dumps([t.public() for t in found], indent=2))
                return 0
            print(f"{'ID':<13} {'TENANT':<16} {'NAME':<16} {'CREATED':<21} {'LAST USED':<21} EXPIRES")
            for t in found:
                print(
                    f"{t.id:<13} {t.tenant:<16} {t.name or '-':<16} {_when(t.created_ms):<21} "
                    f"{_when(t.last_used_ms):<21} {_when(t.expires_ms)}"
                )
            return 0
        revoked = await store.revoke(args.id)
        if revoked is None:
            raise ConfigError(f"no token with id {args.id!r} (see 'hookbus tokens list')")
        print(f"revoked {revoked.id} ({revoked.tenant}{', ' + revoked.name if revoked.name else ''})")
        return 0
    finally:
        await redis.aclose()


def _read_files(paths: list[str]) -> list[tuple[str, str]]:
    files = []
    for path in paths:
        try:
            files.append((Path(path).name, Path(path).read_text(encoding="utf-8-sig")))
        except OSError as exc:
            raise ConfigError(f"cannot read {path}: {exc.strerror or exc}") from exc
    return files


def _check_scope(key_file: str, public: bytes, layer: str, trusted: Sequence[TrustedKey]) -> None:
    """ConfigError when ``trusted`` (this shell's HOOKBUS_POLICY_TRUSTED_KEYS) lets the key sign
    other layers only: nodes that trust it so would refuse the version."""
    listed = [k.scope for k in trusted if k.public == public]
    scope = functools.reduce(operator.or_, listed, KeyScope())
    if listed and not scope.allows(layer):
        raise ConfigError(
            f"{key_file} (key {key_id(public)}) may sign {scope} only, not {layer} "
            "(HOOKBUS_POLICY_TRUSTED_KEYS): nodes would refuse this version, so nothing was pushed"
        )


async def _policy(args: argparse.Namespace, redis_url: str, keys: Keyspace, trusted: Sequence[TrustedKey]) -> int:
    redis = connect(redis_url)
    try:
        store = PolicyStore(redis, keys, redis_url)
        action = args.policy_command
        if action == "push":
            files = _read_files(args.files)
            author = os.environ.get("HOOKBUS_AUTHOR") or None
            key = load_private_key(args.sign) if args.sign else None
            if key is not None:
                _check_scope(args.sign, raw_public(key), scope_for(args.tenant), trusted)
            version, changed = await store.push(
                files, args.tenant, message=args.message, author=author, signing_key=key
            )
            scope = scope_for(args.tenant)
            signed = f", signed by key {version.signed_by}" if version.signed_by else ""
            print(f"{scope}: version {version.id} {'is now current' if changed else 'is already current'}{signed}")
            return 0
        if action == "versions":
            scope = scope_for(args.tenant)
            current = (await store.current_ids()).get(scope)
            for v in await store.versions(scope):
                mark = "*" if v.id == current else " "
                signed = f"signed:{v.signed_by}" if v.signed_by else "unsigned"
                print(f"{mark} {v.id}  {_when(v.created_ms)}  {v.author:<12} {signed:<23} {v.message}")
            return 0
        if action == "show":
            shown = await store.get(args.version)
            if shown is None:
                raise ConfigError(f"no policy version {args.version!r}")
            print(json.dumps(shown.summary()))
            for name, text in shown.files:
                print(f"--- {name}\n{text}", end="" if text.endswith("\n") else "\n")
            return 0
        if action == "diff":
            old, new = await store.get(args.old), await store.get(args.new)
            if old is None or new is None:
                raise ConfigError(f"no policy version {args.old if old is None else args.new!r}")
            print(diff(old, new), end="")
            return 0
        version = await store.rollback(args.tenant, args.to)
        signed = f", signed by key {version.signed_by}" if version.signed_by else " (unsigned)"
        print(f"{scope_for(args.tenant)}: version {version.id} is current again{signed}")
        return 0
    finally:
        await redis.aclose()


def keygen_command(args: argparse.Namespace) -> int:
    """``policy keygen``: the private key to ``--out`` (0600); the public key with ``--scope``, as
    HOOKBUS_POLICY_TRUSTED_KEYS takes it, to ``--out``.pub and stdout."""
    scope = KeyScope.parse(args.scope, "--scope")
    out = Path(args.out)
    public_out = out.with_name(out.name + ".pub")
    if public_out.exists():
        raise ConfigError(f"{public_out} exists; keygen does not replace a key (choose another --out)")
    public = generate(out)
    entry = str(TrustedKey(public, scope))
    public_out.write_text(entry + "\n", encoding="utf-8")
    print(entry)
    print(
        f"hookbus: private key {out} (keep it secret: it signs policy), key id {key_id(public)}, may sign "
        f"{scope}; add the line above to HOOKBUS_POLICY_TRUSTED_KEYS (comma-separated) on every node",
        file=sys.stderr,
    )
    return 0


def tokens_command(args: argparse.Namespace, redis_url: str, keys: Keyspace) -> int:
    return asyncio.run(_tokens(args, redis_url, keys))


def policy_command(args: argparse.Namespace, redis_url: str, keys: Keyspace, trusted: Sequence[TrustedKey] = ()) -> int:
    """Raises PolicyError (printed line by line by the caller) for a push that does not load;
    ConfigError for one signed by a key ``trusted`` does not let sign its layer."""
    return asyncio.run(_policy(args, redis_url, keys, trusted))


__all__ = [
    "POLICY_ACTIONS",
    "keygen_command",
    "policy_command",
    "tokens_command",
]
