"""The shim reads the gateway's answer as ``json.loads`` would, without loading ``json``."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from hookbus.shim_json import _Unsure, _value, json_object


def reference(answer: bytes) -> dict[str, Any] | None:
    """What the shim used to do: ``json.loads``, kept when it is an object."""
    try:
        parsed = json.loads(answer)
    except (ValueError, RecursionError):
        return None
    return parsed if isinstance(parsed, dict) else None


def read_by_the_subset(answer: bytes) -> bool:
    """Whether the pure-Python reader read all of ``answer`` itself (no ``_json``, no ``json``)."""
    text = answer.decode()
    try:
        return _value(text, 0, 0)[1] == len(text)
    except (_Unsure, IndexError, KeyError, ValueError):
        return False


GATEWAY_ANSWERS = [
    b'{"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"deny",'
    b'"permissionDecisionReason":"hookbus dangerous-commands pack (rule: Bash(rm -rf /))"}}',
    b'{"decision":"block","reason":"no \\"sudo\\" here\\n\\tsee C:\\\\policy \\/ docs","continue":true}',
    b'{"exit_code":2,"stderr":"denied","stdout":"","suppressOutput":false,"x":null,"n":-0,"list":[1,[],{}]}',
    '{"systemMessage":"naïve café ✓ 😀"}'.encode(),
    b'{ "a" : [ 1 , 2 ] ,\n\t"b" :\r\n{ } }',
]


@pytest.mark.parametrize("answer", GATEWAY_ANSWERS)
def test_the_gateways_answers_are_read_without_json(answer: bytes) -> None:
    assert read_by_the_subset(answer)
    assert repr(json_object(answer)) == repr(reference(answer))


@pytest.mark.parametrize(
    "answer",
    [
        b'{"a":1.5}',
        b'{"a":1e3}',
        b'{"a":NaN}',
        b'{"a":-Infinity}',
        b'{"a":"\\u00e9\\ud83d\\ude00"}',
        b'{"a":"\\ud800"}',
        b'{"a":"\\uZZZZ"}',
        b'{"a":"\\q"}',
        b'{"a":"tab\there"}',
        b'{"a":"\x1f"}',
        b'{"a":01}',
        b'{"a":-}',
        b'{"a":1.}',
        b'{"a":tru}',
        b'{"a":truex}',
        b'{"a":1,}',
        b"{,}",
        b'{"a"}',
        b'{"a":1}{"b":2}',
        b'{"a":[1 2]}',
        b'{"a":[1,]}',
        b'{"a":"unterminated}',
        b"{'a':1}",
        b"{1:2}",
        b'{"a":' + b"9" * 5000 + b"}",
        b"[" * 40 + b"]" * 40,
        b'{"a":' + b"[" * 40 + b"]" * 40 + b"}",
        b'{"a":' + b"[" * 2000 + b"]" * 2000 + b"}",
        b'[{"a":1}]',
        b'"text"',
        b"7",
        b"null",
        b"",
        b"\xff{}",
        b'\xef\xbb\xbf{"a":1}',
        '{"a":"x"}'.encode("utf-16"),
        b'{"a":"x\x7f\xc2\xa0\xe2\x80\xa8"}',
        b'{"a":1,"a":2}',
    ],
)
def test_anything_else_gets_jsons_own_verdict(answer: bytes) -> None:
    assert repr(json_object(answer)) == repr(reference(answer))


ALPHABET = ["a", " ", '"', "\\", "/", "\n", "\t", "\x00", "\x1f", "\x7f", "é", "\u2028", "😀", *"{}[]:,01-.eutnfN"]


def random_value(rng: random.Random, depth: int = 0) -> Any:
    kind = rng.randint(0, 9 if depth < 4 else 5)
    if kind == 0:
        return rng.choice([True, False, None])
    if kind == 1:
        return rng.randint(-(10**6), 10**6)
    if kind == 2:
        return rng.choice([0.5, -1e10, 1e-5, 3.0, float("nan"), float("inf")])
    if kind <= 5:
        return "".join(rng.choice(ALPHABET) for _ in range(rng.randint(0, 6)))
    if kind <= 7:
        return [random_value(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    return {str(rng.random()): random_value(rng, depth + 1) for _ in range(rng.randint(0, 3))}


def test_random_and_mangled_answers_are_read_as_json_reads_them() -> None:
    rng = random.Random(20261206)
    read_alone = 0
    for _ in range(4000):
        value = {str(i): random_value(rng) for i in range(rng.randint(0, 4))}
        text = json.dumps(
            value,
            ensure_ascii=rng.random() < 0.5,
            indent=rng.choice([None, 1, "\t"]),
            separators=rng.choice([None, (",", ":"), (" , ", " : ")]),
        )
        if rng.random() < 0.5:  # mangled: characters dropped, added, replaced
            chars = list(text)
            for _ in range(rng.randint(1, 3)):
                at = rng.randint(0, len(chars))
                action = rng.randint(0, 2) if at < len(chars) else 1
                if action == 0:
                    del chars[at]
                elif action == 1:
                    chars.insert(at, rng.choice(ALPHABET))
                else:
                    chars[at] = rng.choice(ALPHABET)
            text = "".join(chars)
        answer = text.encode().strip()
        assert repr(json_object(answer)) == repr(reference(answer)), answer
        read_alone += read_by_the_subset(answer)
    assert read_alone > 500  # the subset is exercised, not only the fallback
