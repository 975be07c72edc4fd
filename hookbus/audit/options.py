"""The delivery options of ``hookbus audit follow``, read from its command line."""

from __future__ import annotations

import dataclasses
import re
from typing import Any, Final

from bus.errors import ConfigError


@dataclasses.dataclass(frozen=True, slots=True)
class SinkOptions:
    """How ``hookbus audit follow`` was asked to deliver (flags of the command line)."""

    secret_env: str | None = None
    allow_networks: tuple[str, ...] = ()
    timeout_s: float = 10.0
    batch: int | None = None
    gzip: bool = False
    max_batch_bytes: int | None = None
    dead_letters: str | None = None
    rotate_bytes: int | None = None
    rotate_every_s: float | None = None


def sink_options(args: Any) -> SinkOptions:
    """The :class:`SinkOptions` of ``hookbus audit follow``'s parsed arguments."""
    from hookbus.audit.delivery import default_dead_letters

    return SinkOptions(
        secret_env=args.secret_env,
        allow_networks=tuple(args.allow_network or ()),
        timeout_s=args.timeout,
        batch=args.batch,
        gzip=args.gzip,
        max_batch_bytes=parse_bytes(args.max_batch_bytes) if args.max_batch_bytes else None,
        dead_letters=args.dead_letter or default_dead_letters(args.group),
        rotate_bytes=parse_bytes(args.rotate_bytes) if args.rotate_bytes else None,
        rotate_every_s=parse_duration_s(args.rotate_every) if args.rotate_every else None,
    )


_SIZE: Final = re.compile(r"^(\d+)\s*([kmg]i?b?|b)?$", re.IGNORECASE)
_SIZE_UNITS: Final = {"": 1, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
_DURATION: Final = re.compile(r"^(\d+(?:\.\d+)?)\s*(s|m|h|d)?$")
_DURATION_S: Final = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_bytes(text: str) -> int:
    """A size: ``1048576``, ``512k``, ``100M``, ``1GiB`` (units of 1,024)."""
    found = _SIZE.match(text.strip())
    if found is None or int(found[1]) <= 0:
        raise ConfigError(f"not a size: {text!r} (write it like 100M, 512k or 1048576)")
    return int(found[1]) * _SIZE_UNITS[(found[2] or "")[:1].lower()]


def parse_duration_s(text: str) -> float:
    """A duration in seconds: ``3600``, ``90s``, ``15m``, ``1h``, ``1d``."""
    found = _DURATION.match(text.strip())
    if found is None or float(found[1]) <= 0:
        raise ConfigError(f"not a duration: {text!r} (write it like 1h, 1d, 15m or 3600)")
    return float(found[1]) * _DURATION_S[found[2] or ""]


__all__ = ["SinkOptions", "parse_bytes", "parse_duration_s", "sink_options"]
