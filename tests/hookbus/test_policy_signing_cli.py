"""``hookbus policy keygen``, ``policy push --sign`` and ``HOOKBUS_POLICY_TRUSTED_KEYS`` as a user runs them."""

from __future__ import annotations

import re
import stat
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from bus.policy.signing import key_id, load_private_key, public_key_text, raw_public
from bus.runtime.settings import parse_trusted_keys
from tests.conftest import run_hookbus, wait_for
from tests.up import UpProcess, running_up

pytestmark = pytest.mark.system

BAD_KEY_LINE = (
    "hookbus: HOOKBUS_POLICY_TRUSTED_KEYS: 'ed25519:bm90IGEga2V5' is not an Ed25519 public key like "
    "'ed25519:<base64 of 32 bytes>' (as 'hookbus policy keygen' prints)\n"
)
#: A key as nodes trusted one before keys had scopes.
UNSCOPED = public_key_text(bytes(32))
UNSCOPED_LINE = (
    f"hookbus: HOOKBUS_POLICY_TRUSTED_KEYS: key '{UNSCOPED[:24]}...' has no scope: append @org, @tenant or "
    "@tenant:NAME to say which policy layers it may sign (@org+tenant for every layer, as before)\n"
)


def keygen(tmp_path: Path, name: str, scope: str = "org") -> tuple[Path, str]:
    made = run_hookbus("policy", "keygen", "--scope", scope, "--out", str(tmp_path / name), cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    return tmp_path / name, made.stdout.strip()


def denying(tmp_path: Path, pattern: str) -> Path:
    path = tmp_path / f"policy-{len(list(tmp_path.glob('policy-*')))}.yaml"
    rule = {"type": "rule", "deny": [f"Bash({pattern})"], "reason": "signed"}
    path.write_text(yaml.safe_dump({"hooks": {"PreToolUse": [{"matcher": "Bash", "hooks": [rule]}]}}))
    return path


def test_keygen_writes_a_private_key_0600_and_prints_the_form_nodes_trust(tmp_path: Path) -> None:
    made = run_hookbus("policy", "keygen", "--scope", "tenant:acme+tenant:beta", cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    private, public = tmp_path / "hookbus-policy.key", made.stdout.strip()
    assert stat.S_IMODE(private.stat().st_mode) == 0o600
    assert re.fullmatch(r"ed25519:[A-Za-z0-9+/]{43}=@tenant:acme\+tenant:beta", public)
    assert (tmp_path / "hookbus-policy.key.pub").read_text() == public + "\n"
    (trusted,) = parse_trusted_keys(public)
    raw = trusted.public
    assert raw_public(load_private_key(private)) == raw
    assert f"key id {key_id(raw)}, may sign tenant:acme+tenant:beta" in made.stderr
    assert "HOOKBUS_POLICY_TRUSTED_KEYS" in made.stderr
    again = run_hookbus("policy", "keygen", "--scope", "org", cwd=tmp_path)  # never replaces a key
    assert again.returncode == 1 and again.stderr.count("\n") == 1 and "exists" in again.stderr
    assert raw_public(load_private_key(private)) == raw


def test_keygen_wants_a_scope_and_writes_nothing_without_a_good_one(tmp_path: Path) -> None:
    unscoped = run_hookbus("policy", "keygen", cwd=tmp_path)
    assert unscoped.returncode == 2 and "the following arguments are required: --scope" in unscoped.stderr
    wrong = run_hookbus("policy", "keygen", "--scope", "tenants", cwd=tmp_path)
    assert wrong.returncode == 1 and wrong.stderr == (
        "hookbus: --scope: scope 'tenants' is not org, tenant (any tenant) or tenant:NAME "
        "(several joined by '+', like 'org+tenant')\n"
    )
    assert list(tmp_path.iterdir()) == []


def test_push_refuses_a_file_that_is_not_a_signing_key(tmp_path: Path, redis_url: str) -> None:
    not_a_key = tmp_path / "policy.yaml"
    not_a_key.write_text("hooks: {}\n")
    pushed = run_hookbus("policy", "push", str(not_a_key), "--sign", str(not_a_key), HOOKBUS_REDIS_URL=redis_url)
    assert pushed.returncode == 1 and "Traceback" not in pushed.stderr
    assert (
        pushed.stderr
        == f"hookbus: {not_a_key} is not an unencrypted PEM private key (make one with 'hookbus policy keygen')\n"
    )


@pytest.mark.parametrize("role", ["gateway", "dispatcher", "worker", "up"])
def test_a_bad_or_unscoped_trusted_key_stops_every_role_at_start_with_one_line(
    role: str, redis_url: str, tmp_path: Path
) -> None:
    for trusted, line in [("ed25519:bm90IGEga2V5@org", BAD_KEY_LINE), (f"{UNSCOPED}@org,{UNSCOPED}", UNSCOPED_LINE)]:
        started = run_hookbus(
            role,
            "--state-dir" if role == "up" else "--redis-url",
            str(tmp_path) if role == "up" else redis_url,
            HOOKBUS_POLICY_TRUSTED_KEYS=trusted,
        )
        assert started.returncode == 1 and started.stderr == line


def test_push_refuses_a_key_the_trusted_keys_here_do_not_let_sign_that_layer(tmp_path: Path, redis_url: str) -> None:
    key, public = keygen(tmp_path, "acme.key", "tenant:acme")
    policy = str(denying(tmp_path, "curl *"))
    prefix = f"m5{tmp_path.name}:"
    for layer in (["--org"], ["--tenant", "beta"]):
        pushed = run_hookbus(
            "policy", "push", policy, *layer, "--sign", str(key), "--key-prefix", prefix,
            HOOKBUS_REDIS_URL=redis_url, HOOKBUS_POLICY_TRUSTED_KEYS=public,
        )  # fmt: skip
        name = "org" if layer == ["--org"] else "tenant:beta"
        assert pushed.returncode == 1 and pushed.stderr == (
            f"hookbus: {key} (key {key_id(parse_trusted_keys(public)[0].public)}) may sign tenant:acme only, not "
            f"{name} (HOOKBUS_POLICY_TRUSTED_KEYS): nodes would refuse this version, so nothing was pushed\n"
        )
    versions = [
        run_hookbus("policy", "versions", *layer, "--key-prefix", prefix, HOOKBUS_REDIS_URL=redis_url).stdout
        for layer in ([], ["--tenant", "beta"])
    ]
    assert versions == ["", ""]
    own = run_hookbus(
        "policy", "push", policy, "--tenant", "acme", "--sign", str(key), "--key-prefix", prefix,
        HOOKBUS_REDIS_URL=redis_url, HOOKBUS_POLICY_TRUSTED_KEYS=public,
    )  # fmt: skip
    assert own.returncode == 0 and own.stdout.startswith("tenant:acme: version "), own.stderr


def rejected(up: UpProcess, reason: str) -> float:
    text = httpx.get(f"{up.url}/metrics", timeout=5).text
    found = re.search(rf'^hookbus_policy_rejected_total{{reason="{reason}"}} (\S+)$', text, re.M)
    return float(found.group(1)) if found else 0.0


def decision(up: UpProcess, command: str) -> str:
    hook_input = {
        "hook_event_name": "PreToolUse",
        "session_id": "s",
        "tool_name": "Bash",
        "tool_input": {"command": command},
    }
    answer: dict[str, Any] = up.emit("tok-acme", hook_input)
    return str(answer.get("hookSpecificOutput", {}).get("permissionDecision", "none"))


@pytest.mark.timeout(120)
def test_hookbus_up_takes_versions_pushed_with_sign_and_refuses_others(tmp_path: Path) -> None:
    key, public = keygen(tmp_path, "ci.key")
    other_key, _ = keygen(tmp_path, "other.key")
    env = {"HOOKBUS_TOKENS": "acme:tok-acme", "HOOKBUS_POLICY_TRUSTED_KEYS": public}
    with running_up(tmp_path, denying(tmp_path, "rm -rf *"), env) as up:
        url = up.redis_url()
        signed = run_hookbus(
            "policy", "push", str(denying(tmp_path, "curl *")), "--sign", str(key), HOOKBUS_REDIS_URL=url
        )
        key_name = key_id(parse_trusted_keys(public)[0].public)
        assert signed.returncode == 0 and signed.stdout.endswith(f"is now current, signed by key {key_name}\n"), (
            signed.stderr
        )
        wait_for(lambda: decision(up, "curl x") == "deny", timeout_s=10)
        assert run_hookbus("policy", "push", str(denying(tmp_path, "wget *")), HOOKBUS_REDIS_URL=url).returncode == 0
        wait_for(lambda: rejected(up, "unsigned") >= 2, timeout_s=10)  # the gateway and the dispatcher at least
        assert decision(up, "wget x") == "none" and decision(up, "curl x") == "deny"
        untrusted = run_hookbus(
            "policy", "push", str(denying(tmp_path, "nc *")), "--sign", str(other_key), HOOKBUS_REDIS_URL=url
        )
        assert untrusted.returncode == 0
        wait_for(lambda: rejected(up, "untrusted_key") >= 2, timeout_s=10)

        def signatures() -> dict[str, Any]:
            found: dict[str, Any] = httpx.get(f"{up.url}/readyz", timeout=5).json()["checks"]["policy_signatures"]
            return found

        # The metric counts every process; the gateway's own /readyz may refresh a moment later.
        wait_for(lambda: "not trusted" in signatures()["refused"].get("org", ""), timeout_s=10)
        check = signatures()
        assert check["verified"] and check["trusted_keys"] == [key_name] and "not trusted" in check["refused"]["org"]
        versions = run_hookbus("policy", "versions", HOOKBUS_REDIS_URL=url).stdout.splitlines()
        other_name = key_id(raw_public(load_private_key(other_key)))
        signers = [re.findall(r" (signed:\w+|unsigned) ", line) for line in versions]
        assert signers == [[f"signed:{key_name}"], ["unsigned"], [f"signed:{other_name}"]]
        assert "refused (unsigned)" in up.out.read_text()
        first = signed.stdout.split("version ")[1].split()[0]
        rolled = run_hookbus("policy", "rollback", "--to", first, HOOKBUS_REDIS_URL=url)
        assert rolled.stdout == f"org: version {first} is current again, signed by key {key_name}\n", rolled.stderr
        wait_for(lambda: httpx.get(f"{up.url}/readyz", timeout=5).json()["checks"]["policy_signatures"]["ok"], 10)
        assert decision(up, "curl x") == "deny" and decision(up, "nc x") == "none"
