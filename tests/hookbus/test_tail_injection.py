"""``hookbus tail`` lines against values an agent chose to forge lines or drive the terminal."""

from __future__ import annotations

import pytest

from hookbus.tail import format_record
from tests.hookbus.test_tail import record

#: Every character class that must not reach the operator's terminal raw.
RAW = [chr(c) for c in (*range(0x20), 0x7F, *range(0x80, 0xA0))] + [
    "\u202a",
    "\u202b",
    "\u202c",
    "\u202d",
    "\u202e",
    "\u2066",
    "\u2067",
    "\u2068",
    "\u2069",
    "\u200e",
    "\u200f",
    "\u061c",
]


def test_a_forged_line_stays_on_the_one_line_escaped() -> None:
    forged = "s-1\n22:13:20 globex/s-9 PreToolUse(Bash) -> allow [decided, 1 ms]"
    line = format_record(record("e1", session=forged, tool="Bash\r\x1b[2J\x1b]0;owned\x07", event="Pre\u202eesU"))
    assert "\n" not in line and "\r" not in line and "\x1b" not in line and "\x07" not in line
    assert "\u202e" not in line
    assert "default/s-1\\x0a22:13:20 Pre" in line  # the session id is cut at 12, then escaped
    assert "Pre\\u202eesU(Bash\\x0d\\x1b[2J\\x1b]0;owned\\x07)" in line


@pytest.mark.parametrize("char", RAW, ids=[f"U+{ord(c):04X}" for c in RAW])
def test_no_control_character_comes_out_raw(char: str) -> None:
    output = {"reason": f"why{char}not", "hookSpecificOutput": {"additionalContext": f"ctx{char}x"}}
    line = format_record(
        record("e1", session=f"s{char}1", tenant=f"t{char}", tool=f"T{char}", event=f"E{char}", output=output)
    )
    assert char not in line
    escaped = f"\\x{ord(char):02x}" if ord(char) < 0x100 else f"\\u{ord(char):04x}"
    assert f"s{escaped}1" in line and f"T{escaped}" in line and f"E{escaped}" in line


def test_plain_lines_are_unchanged() -> None:
    line = format_record(record("e1", output={"reason": "tab\tand é, ünïcode — fine"}))
    assert line.endswith("-> deny [decided, 12 ms] tab\\x09and é, ünïcode — fine")
