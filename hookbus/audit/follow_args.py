"""The delivery, filter and metrics options of ``hookbus audit follow`` (the standard library only:
building the command line must stay fast)."""

from __future__ import annotations

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs milliseconds on every hook
if TYPE_CHECKING:
    import argparse  # only named: `hookbus hook` loads this module and must not load argparse


def follow_delivery(follow: argparse.ArgumentParser, agents: tuple[str, ...]) -> None:
    """Add the delivery, filter and metrics options of ``hookbus audit follow`` to ``follow``."""
    follow.add_argument(
        "--batch",
        type=int,
        metavar="N",
        help="records per request or write (default 100; otlp 500); --batch 1 posts one webhook per record",
    )
    follow.add_argument(
        "--linger",
        type=float,
        default=0.2,
        metavar="S",
        help="when fewer records than a batch are waiting, wait this long for more (default 0.2; 0: send at once)",
    )
    follow.add_argument("--gzip", action="store_true", help="gzip-compress each request (http, otlp)")
    follow.add_argument(
        "--max-batch-bytes", metavar="SIZE", help="cap on a request body as sent, like 1M (default 4M; http, otlp)"
    )
    follow.add_argument(
        "--dead-letter",
        metavar="PATH",
        help="where records a receiver refuses for good go, with the reason "
        "(default ./hookbus-audit-GROUP.dead-letters.jsonl)",
    )
    follow.add_argument("--rotate-bytes", metavar="SIZE", help="jsonl: start a new file past this size, like 100M")
    follow.add_argument(
        "--rotate-every", metavar="DURATION", help="jsonl: start a new file every period, like 1h or 1d (UTC)"
    )
    for flag, what in (
        ("tenant", "tenant"),
        ("event", "event name"),
        ("decision", "decision (allow, deny, ...) or outcome (decided, recorded, fail-open)"),
        ("agent", f"agent ({', '.join(agents)})"),
    ):
        follow.add_argument(
            f"--{flag}",
            action="append",
            metavar=flag.upper(),
            help=f"deliver only records of this {what} (repeat or comma-separate); the others are acknowledged",
        )
    follow.add_argument(
        "--metrics-port",
        type=int,
        metavar="PORT",
        help="serve the sink's metrics on /metrics of this port ($HOOKBUS_METRICS_TOKEN guards it)",
    )
    follow.add_argument(
        "--metrics-host", metavar="HOST", help="address for --metrics-port (default $HOOKBUS_METRICS_HOST or 127.0.0.1)"
    )


__all__ = ["follow_delivery"]
