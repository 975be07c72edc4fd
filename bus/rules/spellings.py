"""Other ways to write the same command, for rules written one way (:mod:`bus.rules.readings`).

``rm -r -f x``, ``rm -fR x`` and ``rm --recursive --force x`` are all ``rm -rf x``; a rule
``Bash(rm -rf *)`` is written one way, so each reading is also matched with its flags merged,
long flags in their short form and in a canonical order (``rm -rfv x`` also as ``rm -rf x``),
and git's short flags in the long form rules are written with (``git push -f`` is
``git push --force``, as is a ``+branch`` refspec). These are *spellings*: the same command,
so an allow rule may match any of them.

Some commands say less than their words show, and are read as what they mean instead
(:func:`as_meant`): ``git push --force --force-with-lease`` pushes with the lease (git checks
it whatever ``--force`` says), and an operand after ``--`` that starts with ``-`` is a file
(``rm -- -rf`` removes the file ``-rf``; read as ``rm -- ./-rf``, which no rule about options meets).
"""

from __future__ import annotations

from typing import Final

from bus.rules.shellwords import Word

#: Programs whose short flags are read merged and long flags as their short form: the long
#: options with a short form, and the flags a canonical spelling puts first (``rm -rf``).
_FLAGS: Final[dict[str, tuple[dict[str, str], str]]] = {
    "rm": ({"--recursive": "r", "--force": "f", "--dir": "d", "--verbose": "v", "-R": "r"}, "rf"),
    "cp": ({"--recursive": "r", "--force": "f", "-R": "r"}, "rf"),
    "mv": ({"--force": "f"}, "f"),
    "rmdir": ({"--parents": "p"}, "p"),
    "chmod": ({"--recursive": "R"}, "R"),
    "chown": ({"--recursive": "R"}, "R"),
    "chgrp": ({"--recursive": "R"}, "R"),
    "git clean": ({"--force": "f", "--dry-run": "n", "--quiet": "q"}, "f"),
    "git branch": ({"--delete": "d", "--force": "f"}, "D"),
}
#: git subcommands whose short flags have a long form the rules are written with.
#: Their short flags' long forms, and the short options that take a value (``-bNAME``).
_GIT_LONG: Final = {
    "push": ({"f": "--force", "d": "--delete"}, "o"),
    "checkout": ({"f": "--force"}, "bB"),
    "switch": ({"f": "--force"}, "cC"),
}


#: Programs (and git's subcommands) that read every word after ``--`` as an operand, a path.
_OPERANDS_AFTER_DASHES: Final = frozenset({"rm", "rmdir", "shred", "chmod", "chown", "chgrp", "truncate", "git"})
_FORCE: Final = frozenset({"-f", "--force"})


def as_meant(words: tuple[Word, ...]) -> tuple[Word, ...] | None:
    """The words of a command whose words say more than it does, written as it runs (see the
    module's docs); ``None`` when it says what it does."""
    if not words or words[0].dynamic or words[0].value not in _OPERANDS_AFTER_DASHES:
        return None
    meant = list(words)
    if words[0].value == "git" and len(words) > 1 and words[1].value == "push":
        values = [word.value for word in words if not word.dynamic]
        if "--force-with-lease" in values and "--no-force-with-lease" not in values:
            end = values.index("--") if "--" in values else len(values)
            meant = [word for k, word in enumerate(words) if k >= end or word.dynamic or word.value not in _FORCE]
    dashes = next((k for k, word in enumerate(meant) if word.value == "--" and not word.dynamic), None)
    if dashes is not None:
        meant[dashes + 1 :] = [
            Word("./" + word.value, "./" + word.value) if word.value.startswith("-") and not word.dynamic else word
            for word in meant[dashes + 1 :]
        ]
    return tuple(meant) if meant != list(words) else None


def spellings(words: tuple[Word, ...]) -> list[str]:
    """Other ways to write the same command, for rules written one way: flags merged and in a
    canonical order (``rm -r -f x``, ``rm -fR x``, ``rm --recursive --force x`` are ``rm -rf x``,
    and ``rm -rfv x`` is also ``rm -rf x``), git's short flags in their long form
    (``git push -f`` is ``git push --force``, as is a ``+branch`` refspec)."""
    if not words or words[0].dynamic:
        return []
    name = words[0].value
    start = 1
    if name == "git" and len(words) > 1:
        if words[1].value in _GIT_LONG:
            return _git_long(words)
        name, start = f"git {words[1].value}", 2
    table = _FLAGS.get(name)
    if table is None:
        return []
    longs, lead = table
    flags: list[str] = []
    kept: list[str] = []
    operands: list[str] = []
    done = False
    for word in words[start:]:
        value = word.value
        if done or not value.startswith("-") or value == "-" or word.dynamic:
            operands.append(word.raw if word.dynamic else value)
        elif value == "--":
            done = True
        elif value.startswith("--"):
            (flags if value in longs else kept).append(longs.get(value, value))
        else:
            flags.extend(longs.get("-" + letter, letter) for letter in value[1:])
    if not flags:
        return []
    if name == "git branch" and "d" in flags and "f" in flags:
        flags = [flag for flag in flags if flag not in "df"] + ["D"]
    present = "".join(letter for letter in lead if letter in flags)
    canonical = present + "".join(sorted(set(flags) - set(lead)))
    found = [" ".join((name, "-" + canonical, *kept, *operands))]
    if (present and present != canonical) or kept:
        found.append(" ".join((name, "-" + present, *operands)) if present else " ".join((name, *operands)))
    return found


def _git_long(words: tuple[Word, ...]) -> list[str]:
    longs, values = _GIT_LONG[words[1].value]
    added: list[str] = []
    rest: list[str] = []
    operands = False
    for word in words[2:]:
        value = word.value
        operands |= value == "--"
        if (
            value.startswith("-")
            and not value.startswith("--")
            and len(value) > 1
            and not word.dynamic
            and not operands
        ):
            cluster = value[1:]
            cut = next((k for k, letter in enumerate(cluster) if letter in values), len(cluster))
            added.extend(longs[letter] for letter in cluster[:cut] if letter in longs)  # then a value: -bNAME
            kept = "".join(letter for letter in cluster[:cut] if letter not in longs) + cluster[cut:]
            if kept:
                rest.append("-" + kept)
        else:
            rest.append(word.raw if word.dynamic else value)
            if words[1].value == "push" and value.startswith("+") and len(value) > 1:
                added.append("--force")
    if not added:
        return []
    return [" ".join(("git", words[1].value, *dict.fromkeys(added), *rest))]


__all__ = ["as_meant", "spellings"]
