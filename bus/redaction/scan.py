"""The built-in detectors compiled into one regex, and the scan of a text with them.

The text comes from the agent, so the scan is linear in its length: no value pattern runs
over the literal that starts another match of its own (a value stops at ``=``, and the mask
then extends over the rest of the run), a masked value is searched again only for the
well-known tokens inside it, and the command-scoped detectors (a password flag of ``mysql``,
``curl``, ``wget``) look at each command of a line once, from its program's name to its end.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import re
import time
from collections.abc import Iterator, Sequence
from typing import Final

from bus.redaction.detectors import BUILTIN_DETECTORS, Detector


def _first_literal(alternative: str) -> list[tuple[str, str]]:
    """``(first character, rest)`` of an alternative; a leading ``[Xx]`` gives one pair per letter."""
    if re.match(r"\[[A-Za-z]{2}\]", alternative):
        return [(alternative[1], alternative[4:]), (alternative[2], alternative[4:])]
    if alternative[0] in "\\[(.*+?{^$|":
        raise ValueError(f"a built-in alternative must start with a literal character: {alternative!r}")
    return [(alternative[0], alternative[1:])]


def _combine(detectors: Sequence[Detector]) -> re.Pattern[str]:
    """One alternation, grouped by first character (``s(?:...)|A(?:...)|...``), so the engine
    skips to the characters some alternative starts with and then tries only those alternatives.
    Each alternative of detector ``i`` ends with an empty group ``d{i}_{n}`` (the last group to
    close, so ``lastgroup`` names the detector); its value groups are ``v{i}_{n}``."""
    by_first: dict[str, list[str]] = {}
    for i, detector in enumerate(detectors):
        names = (f"{i}_{n}" for n in range(1000))
        for alternative in detector.patterns:
            for first, rest in _first_literal(alternative):
                parts = rest.split("(?P<v>")
                body = parts[0] + "".join(f"(?P<v{next(names)}>{part}" for part in parts[1:])
                by_first.setdefault(first, []).append(f"{body}(?P<d{next(names)}>)")
    if not by_first:
        return re.compile(r"(?!)")
    return re.compile("|".join(f"{re.escape(first)}(?:{'|'.join(rests)})" for first, rests in by_first.items()))


#: Where a command ends, for the command-scoped detectors.
_COMMAND_END: Final = re.compile(r"[\n;&|]")


@dataclasses.dataclass(frozen=True, slots=True)
class Compiled:
    pattern: re.Pattern[str]
    detectors: tuple[Detector, ...]
    value_groups: tuple[tuple[str, ...], ...]
    #: The detectors without a value group (well-known tokens), searched for inside a masked value.
    tokens: re.Pattern[str]
    token_detectors: tuple[int, ...]
    #: ``(detector index, program, flag)`` of the command-scoped detectors.
    commands: tuple[tuple[int, re.Pattern[str], re.Pattern[str]], ...]
    extends: tuple[re.Pattern[str] | None, ...]

    @classmethod
    def of(cls, detectors: Sequence[Detector]) -> Compiled:
        pattern = _combine(detectors)
        groups = tuple(tuple(g for g in pattern.groupindex if g.startswith(f"v{i}_")) for i in range(len(detectors)))
        token_detectors = tuple(
            i for i, d in enumerate(detectors) if d.patterns and not any("(?P<v>" in p for p in d.patterns)
        )
        commands = tuple(
            (i, re.compile(program), re.compile(flag)) for i, d in enumerate(detectors) for program, flag in d.commands
        )
        extends = tuple(re.compile(d.extends) if d.extends else None for d in detectors)
        return cls(
            pattern,
            tuple(detectors),
            groups,
            _combine([detectors[i] for i in token_detectors]),
            token_detectors,
            commands,
            extends,
        )


BUILTIN = Compiled.of(BUILTIN_DETECTORS)


class OverBudget(Exception):
    """Masking ran past the deadline set with :func:`masking_deadline`."""


_DEADLINE: Final[contextvars.ContextVar[float | None]] = contextvars.ContextVar("hookbus_mask_deadline", default=None)
#: Matches between two looks at the clock.
_MATCHES_PER_CLOCK: Final = 512


@contextlib.contextmanager
def masking_deadline(budget_s: float) -> Iterator[None]:
    """Inside the block, a scan that runs past ``budget_s`` raises :class:`OverBudget` (a text
    built to match at every other character costs a Python step per match, linear but slow)."""
    token = _DEADLINE.set(time.perf_counter() + budget_s)
    try:
        yield
    finally:
        _DEADLINE.reset(token)


def scan(text: str, compiled: Compiled, spans: list[tuple[int, int, int, str]]) -> None:
    """Append ``(start, end, detector index, name)`` of every built-in match in ``text`` to ``spans``."""
    pos, search = 0, compiled.pattern.search
    deadline, count = _DEADLINE.get(), 0
    while (match := search(text, pos)) is not None:
        count += 1
        if deadline is not None and count % _MATCHES_PER_CLOCK == 0 and time.perf_counter() > deadline:
            raise OverBudget(f"masking took over its budget ({count} matches in {len(text)} characters)")
        index = int(match.lastgroup.partition("_")[0][1:]) if match.lastgroup else 0
        detector = compiled.detectors[index]
        group = next((g for g in compiled.value_groups[index] if match.group(g) is not None), None)
        start, end = match.span(group or 0)
        if detector.check is not None and not detector.check(text, match.start(), text[start:end]):
            # A token may hide in a value (the next search starts inside it); a match without a
            # value failed as a whole, and so would every later start inside it.
            pos = start if group else match.end()
            continue
        extends = compiled.extends[index]
        if extends is not None and text.startswith("=", end):  # ``TOKEN=abc=def``: all of it
            end = extends.match(text, end).end()  # type: ignore[union-attr]
        spans.append((start, end, index, detector.name))
        if group:  # the more specific token inside the value names the mask (a GitHub token in GH_TOKEN=...)
            _tokens(text, start, end, compiled, spans)
        pos = max(end, match.start() + 1)
    if compiled.commands:
        _command_scoped(text, compiled, spans)


def _tokens(text: str, start: int, end: int, compiled: Compiled, spans: list[tuple[int, int, int, str]]) -> None:
    pos = start
    while (match := compiled.tokens.search(text, pos, end)) is not None:
        inner = int(match.lastgroup.partition("_")[0][1:]) if match.lastgroup else 0
        index = compiled.token_detectors[inner]
        detector = compiled.detectors[index]
        if detector.check is not None and not detector.check(text, match.start(), match.group()):
            pos = match.end()
            continue
        spans.append((match.start(), match.end(), index, detector.name))
        pos = match.end()


def _command_scoped(text: str, compiled: Compiled, spans: list[tuple[int, int, int, str]]) -> None:
    """Password flags after their program, within one command: each command is looked at once
    per program, from the program's first appearance in it to the command's end."""
    for index, program, flag in compiled.commands:
        pos, name = 0, compiled.detectors[index].name
        while (found := program.search(text, pos)) is not None:
            stop = _COMMAND_END.search(text, found.end())
            end = stop.start() if stop is not None else len(text)
            at = found.end()
            while (hit := flag.search(text, at, end)) is not None:
                whole = flag.match(text, hit.start())  # the value may run on past the command's end
                assert whole is not None
                spans.append((whole.start("v"), whole.end("v"), index, name))
                at = max(hit.end(), at + 1)
            pos = end + 1


__all__ = [
    "BUILTIN",
    "Compiled",
    "OverBudget",
    "masking_deadline",
    "scan",
]
