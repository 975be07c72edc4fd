"""Text log lines (:class:`bus.runtime.logs.TextFormatter`) against values a client chose."""

from __future__ import annotations

import logging
import re

from bus.runtime.logs import JsonFormatter, TextFormatter, escape_controls, event_fields


def record(message: str, *args: object, **extra: object) -> logging.LogRecord:
    return logging.getLogger("hookbus.test").makeRecord(
        "hookbus.test", logging.INFO, __file__, 1, message, args, None, extra=extra
    )


def fields_of(line: str) -> dict[str, str]:
    """The ``key=value`` pairs after the message, read as logfmt: a quoted value may hold anything."""
    tail = line.split(": ", 1)[1]
    pairs = re.findall(r'(\w+)=("(?:[^"\\]|\\.)*"|[^ "]+)', tail)
    return dict(pairs)


def test_a_session_id_cannot_forge_a_line_or_another_tenants_field() -> None:
    forged = "s-1\n2026-01-01 00:00:00,000 INFO hookbus.gateway[1]: answered tenant=globex"
    line = TextFormatter().format(record("answered", **event_fields("e1", "PreToolUse\x1b[2J", "acme", forged)))
    assert "\n" not in line and "\x1b" not in line
    fields = fields_of(line)
    assert fields["tenant"] == "acme"  # the forged tenant= sits inside the quoted session_id
    assert fields["session_id"] == ('"s-1\\x0a2026-01-01 00:00:00,000 INFO hookbus.gateway[1]: answered tenant=globex"')
    assert fields["event"] == "PreToolUse\\x1b[2J"
    assert line.count("tenant=") == 2 and line.index("tenant=acme") < line.index("session_id=")


def test_values_with_spaces_equals_or_quotes_are_quoted_and_plain_ones_are_not() -> None:
    line = TextFormatter().format(
        record("m", plain="abc", spaced="a b", eq="k=v", quoted='say "hi"', back="c:\\x", empty="")
    )
    assert line.endswith(' plain=abc spaced="a b" eq="k=v" quoted="say \\"hi\\"" back=c:\\x empty=""')


def test_the_message_and_bidi_controls_are_escaped_too() -> None:
    line = TextFormatter().format(record("session %s\r\n\x9b2J", "ab\u202ecd\u2066\u200f\u061c", reason="x\u202e"))
    assert line.endswith(": session ab\\u202ecd\\u2066\\u200f\\u061c\\x0d\\x0a\\x9b2J reason=x\\u202e")


def test_escape_controls_covers_c0_del_c1_and_bidi() -> None:
    for code in (*range(0x20), 0x7F, *range(0x80, 0xA0), 0x61C, 0x200E, 0x200F, *range(0x202A, 0x202F)):
        assert chr(code) not in escape_controls(f"a{chr(code)}b")
    for code in range(0x2066, 0x206A):
        assert escape_controls(chr(code)) == f"\\u{code:04x}"
    assert escape_controls("plain é — ok") == "plain é — ok"


def test_json_lines_keep_the_raw_value() -> None:
    line = JsonFormatter().format(record("m", session_id="a\nb\u202e"))
    assert '"session_id":"a\\nb\u202e"' in line
