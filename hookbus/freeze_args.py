"""The arguments of ``hookbus freeze`` and ``hookbus unfreeze`` (run by :mod:`hookbus.freeze`).

Only the standard library, like :mod:`hookbus.cli`: building the parser must not load httpx.
"""

from __future__ import annotations

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs milliseconds on every start
if TYPE_CHECKING:
    import argparse


def add_freeze_arguments(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The ``freeze`` and ``unfreeze`` commands."""
    url_help = "gateway URL (default $HOOKBUS_URL or http://127.0.0.1:8787); the token is $HOOKBUS_TOKEN"
    freeze = sub.add_parser("freeze", help="deny a tenant's tool calls on every gateway within a second (kill switch)")
    freeze.add_argument("--tenant", metavar="T", help="the tenant to freeze (required unless --list)")
    freeze.add_argument(
        "--tools",
        action="append",
        metavar="MATCHER",
        help="the tools to deny, as a hook matcher (Bash, Write|Edit, mcp__github__.*, * for all); repeat for "
        "several (default: Bash, PowerShell, Write, Edit, MultiEdit, NotebookEdit and every MCP tool)",
    )
    freeze.add_argument(
        "--until",
        metavar="T",
        help="lift it by itself after a duration (30m, 2h, 1d) or at an "
        "ISO 8601 time (default: until 'hookbus unfreeze')",
    )
    freeze.add_argument("--reason", default="", metavar="R", help="why: every denied call says it")
    freeze.add_argument("--list", action="store_true", help="list the freezes this token may see instead")
    freeze.add_argument("--json", action="store_true", help="print the answer as JSON")
    freeze.add_argument("--url", help=url_help)
    unfreeze = sub.add_parser("unfreeze", help="lift a tenant's freeze")
    unfreeze.add_argument("--tenant", required=True, metavar="T")
    unfreeze.add_argument("--url", help=url_help)


__all__ = ["add_freeze_arguments"]
