"""The masker's first look (:data:`bus.redaction.detectors.TRIGGERS`) answers exactly as the plain
alternation it is derived from: a string it wrongly calls clean would reach the audit log unmasked.

``REFERENCE`` is that alternation as it was written before the regex was reshaped (every word
tried at every position); each check compares the two on the same text.
"""

from __future__ import annotations

import random
import re

import pytest

from bus.redaction.detectors import TRIGGERS

GITLAB = ("pat", "ptt", "dt", "rt", "soat", "ft", "imt", "cbt", "oas", "agent")
PARTS = ("ass", "ecret", "oken", "uth", "ookie", "redential", "pwd", "pat", "key", "Key")
#: The words of the reference, as text (the reference writes the GitLab ones as one group): a copy of
#: the module's list on purpose, so that a word dropped there fails here.
WORDS = (
    "://",
    *PARTS,
    *(part.upper() for part in PARTS if part.islower()),
    "-----BEGIN",
    "sk-",
    "AKIA",
    "ASIA",
    "ABIA",
    "ACCA",
    "ghp_",
    "gho_",
    "ghu_",
    "ghs_",
    "ghr_",
    "github_pat_",
    *(f"gl{kind}-" for kind in GITLAB),
    "xox",
    "xapp-",
    "AIza",
    "GOCSPX-",
    "ya29.",
    "eyJ",
    "bearer",
    "Bearer",
    "BEARER",
    "mysql",
    "mariadb",
    "curl",
    "wget",
)
REFERENCE = re.compile(
    "|".join(
        [
            r"=\s*[\"']?[A-Za-z0-9+/=_\-]{20}",
            r":\s*[\"']?[A-Za-z0-9+/=_\-]{20}",
            *(re.escape(word) for word in WORDS if not word.startswith("gl")),
            r"gl(?:pat|ptt|dt|rt|soat|ft|imt|cbt|oas|agent)-",
        ]
    )
)
FILLERS = ("", "a", "s", "x", "run the unit tests ", "é日本語 ", "\u2003", "b-_.:=")


def differ(texts: list[str]) -> list[str]:
    """The texts on which the two disagree."""
    return [t for t in texts if (TRIGGERS.search(t) is None) != (REFERENCE.search(t) is None)]


def test_every_word_alone_and_inside_other_text() -> None:
    texts = [f"{before}{word}{after}" for word in WORDS for before in FILLERS for after in FILLERS]
    assert all(REFERENCE.search(t) for t in texts)
    assert differ(texts) == []


def test_near_misses() -> None:
    texts = []
    for word in WORDS:
        for at in range(len(word)):
            for other in ("z", "0", " ", "é", chr(ord(word[at]) + 1), word[at].swapcase()):
                texts += [word[:at] + other + word[at + 1 :], f"x {word[:at]}{other}{word[at + 1 :]} y"]
        texts += [word[:-1], word[1:], word[:-1] + " " + word[-1], word[0] + "\n" + word[1:]]
        texts += [word[:-1] * 3, word[1:] + word[:-1]]
    assert differ(texts) == []
    assert any(REFERENCE.search(t) is None for t in texts)  # the misses are there


@pytest.mark.parametrize("sign", ["=", ":"])
def test_assignments_of_19_and_20_characters(sign: str) -> None:
    texts = [
        f"{name}{sign}{space}{quote}{value}"
        for name in ("", "X", "shard", "rule ")
        for space in ("", " ", "\t", "\n ", "\u2003", "\u00a0", "\u3000", "\x1c")
        for quote in ("", '"', "'", "`")
        for value in ("A" * 19, "A" * 20, "a1+/=_-" * 3, ("a1+/=_-" * 3)[:19], "é" * 20, "A" * 19 + " A")
    ]
    assert differ(texts) == []
    assert {REFERENCE.search(t) is None for t in texts} == {True, False}


def test_long_and_non_ascii_text() -> None:
    prose = "lorem ipsum dolor sit amet, consectetur adipiscing elit "
    texts = [
        "x" * 2000,
        "s" * 5000,
        (prose * 1200)[:65536],
        (prose * 1200)[:65536] + "curl",
        "curl" + (prose * 1200)[:65536],
        "日本語のテキスト、パスワードは無い。" * 100,
        "Ünïcödé wörds ăñd ŝymbols ∀x ≠ ∅ → ∞ " * 50 + "TOKEN",
        "\uff43\uff55\uff52\uff4c \uff54\uff4f\uff4b\uff45\uff4e " * 20,  # full-width: no word
        "🔑" * 100 + "ecret",
    ]
    assert differ(texts) == []


def test_random_text_over_the_words_own_characters() -> None:
    rng = random.Random(20240607)
    alphabet = "".join(sorted(set("".join(WORDS)))) + " \t\n\"'é\u2003日"
    texts = []
    for _ in range(30000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40)))
        if rng.random() < 0.6:  # a piece of a word (often all of it), so that most texts come close
            word = rng.choice(WORDS)
            start = rng.randint(0, len(word) - 1) if rng.random() < 0.3 else 0
            end = rng.randint(start + 1, len(word)) if rng.random() < 0.5 else len(word)
            at = rng.randint(0, len(text))
            text = text[:at] + word[start:end] + text[at:]
        texts.append(text)
    assert differ(texts) == []
    found = sum(REFERENCE.search(t) is not None for t in texts)
    assert 0.2 * len(texts) < found < 0.8 * len(texts)  # both answers well represented
