"""Masking secrets (:mod:`bus.redaction.redact`, :mod:`bus.redaction.detectors`): each built-in detector on real-looking
samples, the text around them kept, ordinary commands and hashes left alone, policy masks, the
list of what was masked, records, dead-letter entries and log lines.

Every sample here is made up; each has the shape of the real thing.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import orjson
import pytest

from bus.errors import PolicyError
from bus.policy.loading import load_policy
from bus.redaction.detectors import BUILTIN_NAMES, high_entropy, name_before, secret_name
from bus.redaction.redact import (
    DEFAULT,
    Redactor,
    install_log_redaction,
    masked_list,
    parse_pointer,
    redactor_for,
    to_pointer,
)

ANTHROPIC = "sk-ant-api03-Xq7vN2mB9kLp4RtYw8ZcJd3FhG6sA1eU5oIiOyTnMbVcXz0QwErTyUiOpAsDfGhJkLzXcVbNm1234567890-AbCdEfAA"
OPENAI = "sk-proj-T3BlbkFJx9Qm2Lp7Zr4Wn8Vc1Yb6Hd3Kf5Sg0Aj"
AWS_KEY_ID = "AKIAQ3EGW2VJ7XKP4M5N"
AWS_SECRET = "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"
GITHUB = "ghp_R8cT2vYx5Lq9Wm3Nz7Kb1Hd6Jf4Gs0Pa2Ue8i"
GITHUB_FINE = "github_pat_11ABCDEFG0aBcDeFgHiJkL_mNoPqRsTuVwXyZ0123456789aBcDeFgHiJkLmNoPqRsTuVwXyZ01234"
GITLAB = "glpat-x9Kq2Lm7Vn4Bc8Rt1Yw5"
SLACK = "xoxb-2837465019283-4657382910473-Qm7Rk2Vx9Lp4Tn8Wz1Yb6Hc3"
SLACK_HOOK = "https://hooks.slack.com/services/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"
GOOGLE = "AIzaSyD4-kq9Lm2Vx7Rt8Wn3Bc5Yz1Hd6Jf0Gs4P"
JWT = (
    "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiJ1c2VyLTQyIiwiZXhwIjoxNzM2MDAwMDAwfQ."
    "Kx8Lq2Vm7Rn4Tb9Wc1Yz6Hd3Jf5Gs0Pa8Ue2iOo4A"
)
BEARER = "d8f7a6b5c4e3d2f1a0b9c8d7e6f5a4b3"
PEM = (
    "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo4lgOEePzNm0tRgeLezV6ffAt0gun\n"
    "VTLw7onLRnrq0/IzW7yWR7QkrmBL7jTKEn5u+qKhbwKfBstIs+bMY2Zkp18gnTxK\n-----END RSA PRIVATE KEY-----"
)

# (detector, text, the secret that must go, text around it that must stay)
SAMPLES = [
    ("anthropic", f"curl https://api.anthropic.com/v1/messages -H 'x-key: {ANTHROPIC}'", ANTHROPIC, "curl https://"),
    ("anthropic", f"ANTHROPIC_API_KEY={ANTHROPIC}", ANTHROPIC, "ANTHROPIC_API_KEY="),
    ("openai", f"export OPENAI_API_KEY={OPENAI} && python app.py", OPENAI, "&& python app.py"),
    ("aws-access-key", f"aws configure set aws_access_key_id {AWS_KEY_ID}", AWS_KEY_ID, "aws configure set"),
    ("aws-secret", f"aws_secret_access_key = {AWS_SECRET}", AWS_SECRET, "aws_secret_access_key = "),
    ("aws-secret", f'{{"AWS_SECRET_ACCESS_KEY": "{AWS_SECRET}"}}', AWS_SECRET, "AWS_SECRET_ACCESS_KEY"),
    ("github", f"git clone https://{GITHUB}@github.com/acme/app.git", GITHUB, "@github.com/acme/app.git"),
    ("github", f"gh auth login --with-token <<< {GITHUB_FINE}", GITHUB_FINE, "gh auth login"),
    ("gitlab", f"curl --header 'PRIVATE-TOKEN {GITLAB}' https://gitlab.com/api/v4/projects", GITLAB, "PRIVATE-TOKEN"),
    ("slack", f"SLACK_BOT={SLACK} node bot.js", SLACK, "node bot.js"),
    ("slack", f'curl -X POST -d \'{{"text": "hi"}}\' {SLACK_HOOK}', SLACK_HOOK, "curl -X POST"),
    ("google", f"https://maps.googleapis.com/maps/api/geocode/json?address=x&k={GOOGLE}", GOOGLE, "geocode/json"),
    ("jwt", f"Cookie: session={JWT}; Path=/", JWT, "Path=/"),
    (
        "authorization",
        f"curl -H 'Authorization: Bearer {BEARER}' https://api.acme.dev/v2/users",
        BEARER,
        "https://api.acme.dev/v2/users",
    ),
    (
        "authorization",
        f"Authorization: Basic {'dXNlcjpodW50ZXIyLXNlY3JldA=='}",
        "dXNlcjpodW50ZXIyLXNlY3JldA==",
        "Authorization: Basic",
    ),
    (
        "authorization",
        "requests.get(url, headers={'X-Api-Key': 'k8Vq2Lm7Rn4Tb9Wc1Yz6'})",
        "k8Vq2Lm7Rn4Tb9Wc1Yz6",
        "requests.get(url",
    ),
    (
        "private-key",
        f"cat > ~/.ssh/id_rsa <<EOF\n{PEM}\nEOF",
        "MIIEowIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo4lgOEePzNm0tRgeLezV6ffAt0gun",
        "cat > ~/.ssh/id_rsa <<EOF",
    ),
    ("password", "psql --host db --password=Tr0ub4dor-3 --user app", "Tr0ub4dor-3", "--user app"),
    ("password", "sudo openconnect vpn.acme.dev --password 'c0rrect-h0rse' -u bob", "c0rrect-h0rse", "-u bob"),
    ("password", "mysql -u root -pS3cr3t!Pass -h db.internal shop", "S3cr3t!Pass", "-h db.internal shop"),
    ("password", "sshpass -p 'Hunter2Hunter2' ssh deploy@10.0.0.4", "Hunter2Hunter2", "ssh deploy@10.0.0.4"),
    ("password", "echo DB_HOST=db password=hunter2secret >> .env", "hunter2secret", "DB_HOST=db"),
    ("password", "curl -u admin:Adm1nPass https://jenkins.acme.dev/api", "Adm1nPass", "https://jenkins.acme.dev"),
    (
        "url-credentials",
        "pg_dump postgres://app:pg-Pa55w0rd@db.internal:5432/shop > dump.sql",
        "pg-Pa55w0rd",
        "@db.internal:5432/shop",
    ),
    (
        "url-credentials",
        "pip install --index-url https://bob:idx-t0ken-9@pypi.acme.dev/simple pkg",
        "idx-t0ken-9",
        "pypi.acme.dev/simple pkg",
    ),
    (
        "env-secret",
        "export STRIPE_SECRET=rk_live_51Hx9Qm2Lp7Zr4Wn8Vc1Yb6",
        "rk_live_51Hx9Qm2Lp7Zr4Wn8Vc1Yb6",
        "export STRIPE_SECRET=",
    ),
    (
        "env-secret",
        "DEPLOY_HOOK_B64=Zm9vYmFyMjAyNGJhenF1eDEyMzQ1Njc4OTBhYmNk ./deploy.sh",
        "Zm9vYmFyMjAyNGJhenF1eDEyMzQ1Njc4OTBhYmNk",
        "./deploy.sh",
    ),
    ("env-secret", 'api_key: "9f8e7d6c5b4a"', "9f8e7d6c5b4a", "api_key:"),
]

NOT_SECRETS = [
    "git log --format=%H -n 1 && git show 3f2a9c1e5b7d8f0a1c2e3b4d5f6a7b8c9d0e1f2a",
    "git checkout 9fceb02 && git rebase -i HEAD~3",
    "ls -la src/ && mkdir -p build/out && ssh -p 2222 deploy@host",
    "npm run test -- --shard=3/4 --reporter=dot",
    "PWD=/home/dev/project OLDPWD=/tmp PYTHONPATH=/usr/local/lib/python3.11/site-packages pytest",
    "cd /home/dev/project && pytest -k 'test_password_reset' tests/",
    "docker login --password-stdin registry.acme.dev < token.txt",
    "curl https://example.com/path?page=2&sort=asc",
    "session 550e8400-e29b-41d4-a716-446655440000",
    "sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
    "kubectl get pods -n payments -o wide --selector=app=api",
    "The password must be at least 12 characters; see the docs.",
    "python -c 'print(1 + 2)' && echo done",
    "disk-usage-report-generator-tool-version-2 --verbose",
    "/home/dev/.claude/projects/-home-dev-app/4f1c9a0e-2b7d-4c1e-9f3a-8d6b5e2c1a07.jsonl",
    "toolu_01HXq9Lm2Vx7Rt8Wn3Bc5Yz1",
    "",
]


@pytest.mark.parametrize(
    ("detector", "text", "secret", "kept"), SAMPLES, ids=[f"{s[0]}-{i}" for i, s in enumerate(SAMPLES)]
)
def test_each_detector_masks_its_secret_and_keeps_the_text_around_it(
    detector: str, text: str, secret: str, kept: str
) -> None:
    masked, names = DEFAULT.text(text)
    assert secret not in masked
    assert kept in masked
    assert f"[REDACTED:{detector}]" in masked
    assert detector in names


def test_every_builtin_detector_has_a_sample() -> None:
    assert {s[0] for s in SAMPLES} == set(BUILTIN_NAMES)


@pytest.mark.parametrize("text", NOT_SECRETS)
def test_ordinary_commands_hashes_and_paths_are_left_alone(text: str) -> None:
    assert DEFAULT.text(text) == (text, [])


def test_two_secrets_in_one_command_are_both_masked() -> None:
    text = f"curl -H 'Authorization: Bearer {BEARER}' -u bob:B0bPass https://x.acme.dev"
    masked, names = DEFAULT.text(text)
    assert BEARER not in masked and "B0bPass" not in masked
    assert names == ["authorization", "password"]


def test_a_known_token_in_an_assignment_is_named_by_its_kind() -> None:
    assert DEFAULT.text(f"GH={GITHUB}") == ("GH=[REDACTED:github]", ["github"])


@pytest.mark.parametrize(
    ("name", "secret"),
    [
        ("DB_PASSWORD", True),
        ("PGPASSWORD", True),
        ("MYSQL_PWD", True),
        ("apiKey", True),
        ("x-auth-token", True),
        ("client_secret", True),
        ("GITHUB_TOKEN", True),
        ("Authorization", True),
        ("aws_secret_access_key", True),
        ("PWD", False),
        ("max_tokens", False),
        ("author", False),
        ("tool_use_id", False),
        ("session_id", False),
        ("passthrough", False),
    ],
)
def test_secret_names(name: str, secret: bool) -> None:
    assert secret_name(name) is secret


@pytest.mark.parametrize(
    ("value", "random"),
    [
        ("Zm9vYmFyMjAyNGJhenF1eDEyMzQ1Njc4OTBhYmNk", True),
        ("q8R9s0T1u2V3w4X5y6Z7a8B9", True),
        ("3f2a9c1e5b7d8f0a1c2e3b4d5f6a7b8c9d0e1f2a", False),
        ("550e8400-e29b-41d4-a716-446655440000", False),
        ("ThisIsAVeryLongVariableName", False),
        ("/usr/local/lib/python3.11", False),
        ("short1", False),
    ],
)
def test_high_entropy(value: str, random: bool) -> None:
    assert high_entropy(value) is random


def test_the_name_left_of_a_separator() -> None:
    assert name_before('x = {"api_key": "v"}', 14) == "api_key"
    assert name_before("run --shard=3", 11) == ""  # a flag is not a variable
    assert name_before("/a/b=c", 4) == ""


# -- JSON values: members, pointers, policy patterns --------------------------------------------------

HOOK_INPUT: dict[str, Any] = {
    "session_id": "s-1",
    "hook_event_name": "PreToolUse",
    "tool_name": "Write",
    "cwd": "/home/dev",
    "tool_input": {"file_path": "/home/dev/.env", "content": f"GITHUB_TOKEN={GITHUB}\nDEBUG=1\n"},
    "env": {"HOME": "/home/dev", "SENTRY_DSN_KEY": "Zm9vYmFyMjAyNGJhenF1eDEyMzQ1Njc4OTBhYmNk", "API_TOKEN": "abc"},
    "headers": [{"Authorization": "Basic dXNlcjpwYXNz"}],
}


def test_members_are_masked_by_name_and_by_entropy_and_the_rest_is_the_same_object() -> None:
    masked: list[tuple[tuple[str, ...], str]] = []
    out = DEFAULT.value(HOOK_INPUT, ("input",), masked)
    assert out["tool_input"]["content"] == "GITHUB_TOKEN=[REDACTED:github]\nDEBUG=1\n"
    assert out["env"] == {
        "HOME": "/home/dev",
        "SENTRY_DSN_KEY": "[REDACTED:env-secret]",
        "API_TOKEN": "[REDACTED:env-secret]",
    }
    assert out["headers"][0]["Authorization"] == "[REDACTED:env-secret]"
    assert out["cwd"] == "/home/dev"
    assert HOOK_INPUT["env"]["API_TOKEN"] == "abc"  # the original is untouched
    assert masked_list(masked) == [
        {"pointer": "/input/tool_input/content", "detector": "github"},
        {"pointer": "/input/env/SENTRY_DSN_KEY", "detector": "env-secret"},
        {"pointer": "/input/env/API_TOKEN", "detector": "env-secret"},
        {"pointer": "/input/headers/0/Authorization", "detector": "env-secret"},
    ]
    clean = {"a": ["x", {"b": "ls -la"}], "n": 3}
    assert DEFAULT.value(clean) is clean


@pytest.mark.parametrize(
    "redactor", [Redactor(), Redactor(patterns=[("employee-id", r"EMP-\d{6}")])], ids=["builtins", "with-a-pattern"]
)
def test_strings_remembered_as_clean_are_still_judged_by_their_member_name(redactor: Redactor) -> None:
    token = "Q7xLm2Vr9Tb4Wc8Yz1Hd6Jf3Gs0Pk"  # high-entropy, but no detector's shape
    first = {"note": token, "cmd": f"curl -H 'Authorization: Bearer {token}' x"}
    assert redactor.value(first) == {"note": token, "cmd": "curl -H 'Authorization: Bearer [REDACTED:authorization]' x"}
    assert redactor.value(first)["note"] == token  # remembered as clean, and still clean
    # The same string under a name that says secret is masked: the name decides, not the memory.
    assert redactor.value({"API_TOKEN": token}) == {"API_TOKEN": "[REDACTED:env-secret]"}
    # A string with a secret is never remembered: masked every time.
    assert redactor.value({"cmd": first["cmd"]}) == redactor.value({"cmd": first["cmd"]}) != {"cmd": first["cmd"]}


def test_policy_pointers_mask_whole_values_and_patterns_add_detectors() -> None:
    redactor = Redactor(
        ["/tool_input/content", "/edits/*/new_string", "/a~1b"],
        [("employee-id", r"EMP-\d{6}"), ("ticket", r"ticket=(?P<secret>\w+)")],
    )
    hook_input = {
        "tool_input": {"content": {"any": "thing"}, "file_path": "notes.txt"},
        "edits": [{"new_string": "x", "old_string": "y"}, {"new_string": "z"}],
        "a/b": 1,
        "prompt": "ask EMP-123456 about ticket=T42",
    }
    masked: list[tuple[tuple[str, ...], str]] = []
    out = redactor.value(hook_input, ("input",), masked, pointers=True)
    assert out["tool_input"] == {"content": "[REDACTED:pointer]", "file_path": "notes.txt"}
    assert [e["new_string"] for e in out["edits"]] == ["[REDACTED:pointer]"] * 2
    assert out["edits"][0]["old_string"] == "y"
    assert out["a/b"] == "[REDACTED:pointer]"
    assert out["prompt"] == "ask [REDACTED:employee-id] about ticket=[REDACTED:ticket]"
    assert ("/input/a~1b", "pointer") in [(m["pointer"], m["detector"]) for m in masked_list(masked)]


def test_builtins_can_be_turned_off_one_by_one_or_all() -> None:
    assert Redactor(disable=["github"]).text(f"t {GITHUB}")[0] == f"t {GITHUB}"
    assert Redactor(disable=["github"]).text(f"t {GITLAB}")[0] == "t [REDACTED:gitlab]"
    off = Redactor(builtins=False)
    assert not off.active
    assert off.value(HOOK_INPUT) is HOOK_INPUT


def test_json_pointers() -> None:
    assert parse_pointer("/a~1b/~0c/*") == ("a/b", "~c", "*")
    assert to_pointer(("a/b", "~c")) == "/a~1b/~0c"
    for bad in ("a/b", "/a~2"):
        with pytest.raises(ValueError):
            parse_pointer(bad)


def test_the_payload_keeps_its_bytes_when_nothing_is_masked() -> None:
    raw = b'{"session_id": "s-1",  "tool_input": {"command": "ls"}}'
    assert DEFAULT.payload(raw)[0] is raw
    secret_raw = orjson.dumps({"tool_input": {"command": f"echo {GITHUB}"}})
    stored, parsed = DEFAULT.payload(secret_raw)
    assert GITHUB.encode() not in stored and parsed["tool_input"]["command"] == "echo [REDACTED:github]"
    assert DEFAULT.payload(f"not json {GITHUB}".encode())[0] == b"not json [REDACTED:github]"


def test_dead_letter_fields_are_masked_whatever_they_hold() -> None:
    fields: dict[str, bytes | str | int] = {
        "p": orjson.dumps({"prompt": f"key {ANTHROPIC}"}),
        "junk": f"x {GITHUB}".encode(),
        "_why": "bad",
        "n": 3,
    }
    out = DEFAULT.fields(fields)
    assert ANTHROPIC.encode() not in out["p"] and GITHUB.encode() not in out["junk"]  # type: ignore[operator]
    assert out["_why"] == "bad" and out["n"] == 3


def test_log_lines_and_tracebacks_are_masked(caplog: pytest.LogCaptureFixture) -> None:
    install_log_redaction()
    logger = logging.getLogger("hookbus.test")
    with caplog.at_level(logging.INFO, logger="hookbus.test"):
        logger.info("running %s", f"git push https://{GITHUB}@github.com/a/b")
        try:
            raise ValueError(f"bad header Authorization: Bearer {BEARER}")
        except ValueError:
            logger.exception("handler failed")
    assert GITHUB not in caplog.text and BEARER not in caplog.text
    assert "[REDACTED:github]" in caplog.text and "[REDACTED:authorization]" in caplog.text


# -- policy: hookbus.redact ---------------------------------------------------------------------------


def test_the_policy_section_builds_the_redactor(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    path.write_text(
        "hookbus:\n  redact:\n    pointers: [/tool_input/content]\n"
        "    patterns: [{name: emp, regex: 'EMP-[0-9]{6}'}]\n    disable: [jwt]\nhooks: {}\n"
    )
    redactor = redactor_for(load_policy([path]).settings.redact)
    out = redactor.value({"tool_input": {"content": "x"}, "p": f"EMP-123456 {JWT}"}, pointers=True)
    assert out == {"tool_input": {"content": "[REDACTED:pointer]"}, "p": f"[REDACTED:emp] {JWT}"}
    default = tmp_path / "d.yaml"
    default.write_text("hooks: {}\n")
    assert redactor_for(load_policy([default]).settings.redact) is DEFAULT


def test_policy_check_names_every_bad_mask_with_its_line(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    path.write_text(
        "hookbus:\n  redact:\n    pointers: [tool_input]\n"
        "    patterns: [{name: ok, regex: '('}, {name: Bad Name, regex: 'x'}, {name: e, regex: 'a*'}]\n"
        "    disable: [githb]\nhooks: {}\n"
    )
    with pytest.raises(PolicyError) as caught:
        load_policy([path])
    text = str(caught.value)
    assert "p.yaml:3: hookbus.redact.pointers[0]: a JSON pointer starts with '/'" in text
    assert "hookbus.redact.patterns[0].regex: not a valid regex" in text
    assert "hookbus.redact.patterns[1].name: must be 1-64 lower-case letters" in text
    assert "hookbus.redact.patterns[2].regex: regex 'a*' matches the empty string" in text
    assert "p.yaml:5: hookbus.redact.disable[0]: unknown built-in detector 'githb' (did you mean 'github'?)" in text
