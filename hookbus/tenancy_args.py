"""The arguments of ``hookbus tokens ...`` and ``hookbus policy push|versions|show|diff|rollback|keygen``.

Only the standard library, like :mod:`hookbus.cli`: building the parser must not load what
:mod:`hookbus.tenancy` runs these commands with (httpx, redis, the policy store).
"""

from __future__ import annotations

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs milliseconds on every start
if TYPE_CHECKING:
    import argparse

#: Where ``policy keygen`` writes the private key without ``--out``.
DEFAULT_KEY_FILE = "hookbus-policy.key"


def add_tokens_arguments(parser: argparse.ArgumentParser, redis_source: object) -> None:
    """The ``tokens`` sub-commands (``redis_source`` adds --redis-url/--state-dir/--key-prefix)."""
    actions = parser.add_subparsers(dest="tokens_command", required=True, metavar="ACTION")
    create = actions.add_parser("create", help="create a token for a tenant and print it (once)")
    create.add_argument("--tenant", required=True, metavar="T")
    create.add_argument("--name", default="", metavar="N", help="what the token is for")
    create.add_argument("--expires", metavar="DURATION", help="30d, 12h, 90m ... (default: never)")
    listing = actions.add_parser("list", help="id, tenant, name, created, last used, expiry (never the token)")
    listing.add_argument("--tenant", metavar="T")
    listing.add_argument("--json", action="store_true")
    revoke = actions.add_parser("revoke", help="revoke a token by id (refused by every gateway within a second)")
    revoke.add_argument("id", metavar="ID")
    for sub in (create, listing, revoke):
        redis_source(sub)  # type: ignore[operator]


def add_policy_arguments(actions: argparse._SubParsersAction[argparse.ArgumentParser], redis_source: object) -> None:
    """``policy push|versions|show|diff|rollback|keygen`` under the existing ``policy`` command."""
    push = actions.add_parser("push", help="validate policy files and make them the current version of a layer")
    push.add_argument("files", nargs="+", metavar="FILE")
    scope = push.add_mutually_exclusive_group()
    scope.add_argument("--tenant", metavar="T", help="the tenant's layer")
    scope.add_argument("--org", action="store_true", help="the org layer every tenant runs under (the default)")
    push.add_argument("--message", "-m", default="", metavar="M")
    push.add_argument(
        "--sign",
        metavar="KEYFILE",
        help="sign the version with this Ed25519 private key (from 'policy keygen'); nodes with "
        "HOOKBUS_POLICY_TRUSTED_KEYS activate only versions signed by a trusted key",
    )
    versions = actions.add_parser("versions", help="a layer's versions, oldest first; * marks the current one")
    versions.add_argument("--tenant", metavar="T")
    show = actions.add_parser("show", help="one version's files")
    show.add_argument("version", metavar="VERSION")
    compare = actions.add_parser("diff", help="a unified diff of two versions")
    compare.add_argument("old", metavar="V1")
    compare.add_argument("new", metavar="V2")
    rollback = actions.add_parser("rollback", help="make an earlier version current again")
    rollback.add_argument("--tenant", metavar="T")
    rollback.add_argument("--to", metavar="VERSION", help="default: the version before the current one")
    for sub in (push, versions, show, compare, rollback):
        redis_source(sub)  # type: ignore[operator]
    keygen = actions.add_parser("keygen", help="make an Ed25519 key pair for 'policy push --sign'")
    keygen.add_argument(
        "--scope",
        required=True,
        metavar="SCOPE",
        help="the policy layers nodes let this key sign: org, tenant (any tenant) or tenant:NAME, "
        "several joined by '+' (org+tenant: every layer)",
    )
    keygen.add_argument(
        "--out",
        default=DEFAULT_KEY_FILE,
        metavar="PATH",
        help=f"the private key's file, written 0600 (default {DEFAULT_KEY_FILE}); the public key and "
        "its scope go to PATH.pub and stdout, as HOOKBUS_POLICY_TRUSTED_KEYS takes them",
    )


__all__ = ["DEFAULT_KEY_FILE", "add_policy_arguments", "add_tokens_arguments"]
