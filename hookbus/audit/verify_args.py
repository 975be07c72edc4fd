"""The options of ``hookbus audit verify`` (the standard library only: building the command line
must stay fast)."""

from __future__ import annotations

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs milliseconds on every hook
if TYPE_CHECKING:
    import argparse  # only named: `hookbus hook` loads this module and must not load argparse


def verify_arguments(verify: argparse.ArgumentParser) -> None:
    """Add what ``hookbus audit verify`` checks (a file, an archive or the live log) and its
    checkpoint options to ``verify``."""
    source = verify.add_mutually_exclusive_group(required=True)
    source.add_argument(
        "file", nargs="?", metavar="FILE", help="a JSON Lines export of hookbus audit export (- for stdin)"
    )
    source.add_argument("--live", action="store_true", help="the decision log in Redis, with its chain heads")
    source.add_argument("--archive", metavar="DIR", help="an archive written by hookbus audit archive")
    verify.add_argument(
        "--trust",
        action="append",
        metavar="KEY",
        help="check the signed checkpoints with this public key (ed25519:..., as keygen prints it)",
    )
    verify.add_argument(
        "--sign", metavar="KEYFILE", help="with --live: when every chain holds, sign each head as a checkpoint"
    )


__all__ = ["verify_arguments"]
