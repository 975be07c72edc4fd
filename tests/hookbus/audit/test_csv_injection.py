"""``hookbus audit export --format csv`` against values that try to forge rows or formulas.

An agent chooses the tool name, the session id and the reason; a bare CR, a LF or a CRLF in one
must stay inside its cell, and no line of any cell may start like a formula.
"""

from __future__ import annotations

import csv
import io

from bus.decisionlog.audit import Window
from tests.conftest import BusProbe
from tests.hookbus.audit.test_command import exported, record, write

FORMULA = ("=", "+", "-", "@")
HOSTILE = (
    "Bash\r=cmd|' /C calc'!A0",
    "Bash\n+1+1",
    "Bash\r\n-2+3",
    "x\r\r@SUM(A1)",
    "\r=1",
    "ok\n\tplain",
)


def unguarded_lines(cell: str) -> list[str]:
    return [line for line in cell.splitlines() if line.startswith(FORMULA)]


async def test_breaks_stay_in_their_cell_and_every_line_is_guarded(bus: BusProbe) -> None:
    entries = []
    for i, hostile in enumerate(HOSTILE):
        entry = record(i)
        entry.tool_name = hostile
        entry.session_id = hostile
        entry.reason = hostile
        entries.append((i, entry))
    await write(bus, *entries)
    text = await exported(bus, Window(), fmt="csv")
    rows = list(csv.reader(io.StringIO(text, newline="")))
    assert len(rows) == 1 + len(HOSTILE)  # the header, then one row per record
    assert all(len(row) == len(rows[0]) for row in rows)
    for row in rows:
        for cell in row:
            assert not cell.startswith(FORMULA), cell
            assert unguarded_lines(cell) == [], cell
    by_column = [dict(zip(rows[0], row, strict=True)) for row in rows[1:]]
    assert [row["tool_name"] for row in by_column] == [
        "Bash\r'=cmd|' /C calc'!A0",
        "Bash\n'+1+1",
        "Bash\r\n'-2+3",
        "x\r\r'@SUM(A1)",
        "\r'=1",
        "ok\n'\tplain",
    ]
    # every line of the file is a record's start or inside a quoted cell: none starts a forged row
    assert text.splitlines()[1].startswith('"')
