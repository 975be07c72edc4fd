"""The arguments of ``hookbus approvals list|show|approve|deny`` (run by :mod:`hookbus.approvals`).

Only the standard library, like :mod:`hookbus.cli`: building the parser must not load httpx.
"""

from __future__ import annotations

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs milliseconds on every start
if TYPE_CHECKING:
    import argparse


def add_approvals_arguments(sub: argparse._SubParsersAction[argparse.ArgumentParser], redis_source: object) -> None:
    """The ``approvals`` command (``redis_source`` adds --redis-url/--state-dir/--key-prefix to
    ``approve``, whose ``--for always`` pushes a policy version)."""
    url_help = "gateway URL (default $HOOKBUS_URL or http://127.0.0.1:8787); the token is $HOOKBUS_TOKEN"
    approvals = sub.add_parser("approvals", help="the approval queue: list, show, approve or deny an agent's ask")
    actions = approvals.add_subparsers(dest="approvals_command", required=True, metavar="ACTION")
    listing = actions.add_parser("list", help="the pending approvals this token may see, the nearest deadline first")
    listing.add_argument("--tenant", metavar="T", help="one tenant's (org-admin tokens)")
    listing.add_argument("--json", action="store_true")
    show = actions.add_parser("show", help="one approval as JSON: the call, the rule, the session's trail and facts")
    show.add_argument("id", metavar="ID")
    approve = actions.add_parser("approve", help="let the call run (an approver token, never the one that asked)")
    approve.add_argument("id", metavar="ID")
    approve.add_argument(
        "--for",
        dest="scope",
        choices=("once", "session", "always"),
        default="once",
        help="this call (default); the same rule for the rest of the session; or always: pushes a version of "
        "the tenant's policy that approves this command or path for good (org admins; needs Redis)",
    )
    approve.add_argument("--input", metavar="JSON", help="the tool input to run instead (checked against the policy)")
    approve.add_argument("--sign", metavar="KEYFILE", help="with --for always: sign the policy version with this key")
    redis_source(approve)  # type: ignore[operator]
    deny = actions.add_parser("deny", help="block the call; the agent's model reads the reason")
    deny.add_argument("id", metavar="ID")
    deny.add_argument("--reason", default="", metavar="R", help="why (the model reads it)")
    for parser in (listing, show, approve, deny):
        parser.add_argument("--url", help=url_help)


__all__ = ["add_approvals_arguments"]
