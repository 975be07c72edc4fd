"""``hookbus tokens`` and ``hookbus policy push|versions|show|diff|rollback`` as a user runs them."""

from __future__ import annotations

from pathlib import Path

import yaml

from tests.conftest import run_hookbus


def policy_file(tmp_path: Path, name: str, rule: str) -> Path:
    path = tmp_path / name
    path.write_text(
        yaml.safe_dump({"hooks": {"PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "rule", "deny": [rule]}]}]}})
    )
    return path


def test_tokens_create_list_revoke(redis_url: str) -> None:
    created = run_hookbus(
        "tokens", "create", "--tenant", "acme", "--name", "ci", "--expires", "30d", HOOKBUS_REDIS_URL=redis_url
    )
    assert created.returncode == 0, created.stderr
    token = created.stdout.strip()
    assert token.startswith("hb_") and "shown only now" in created.stderr
    listed = run_hookbus("tokens", "list", "--tenant", "acme", HOOKBUS_REDIS_URL=redis_url)
    assert listed.returncode == 0 and "acme" in listed.stdout and "ci" in listed.stdout
    assert token not in listed.stdout
    token_id = listed.stdout.splitlines()[1].split()[0]
    assert run_hookbus("tokens", "revoke", token_id, HOOKBUS_REDIS_URL=redis_url).returncode == 0
    again = run_hookbus("tokens", "revoke", token_id, HOOKBUS_REDIS_URL=redis_url)
    assert again.returncode == 1 and again.stderr.startswith("hookbus: no token")
    bad = run_hookbus("tokens", "create", "--tenant", "acme", "--expires", "soon", HOOKBUS_REDIS_URL=redis_url)
    assert bad.returncode == 1 and "duration" in bad.stderr and "Traceback" not in bad.stderr


def test_policy_push_versions_show_diff_rollback(redis_url: str, tmp_path: Path) -> None:
    first, second = policy_file(tmp_path, "a.yaml", "Bash(rm *)"), policy_file(tmp_path, "b.yaml", "Bash(curl *)")
    pushed = run_hookbus("policy", "push", str(first), "--tenant", "acme", "-m", "first", HOOKBUS_REDIS_URL=redis_url)
    assert pushed.returncode == 0 and "is now current" in pushed.stdout, pushed.stderr
    v1 = pushed.stdout.split("version ")[1].split()[0]
    v2 = (
        run_hookbus("policy", "push", str(second), "--tenant", "acme", HOOKBUS_REDIS_URL=redis_url)
        .stdout.split("version ")[1]
        .split()[0]
    )
    versions = run_hookbus("policy", "versions", "--tenant", "acme", HOOKBUS_REDIS_URL=redis_url).stdout
    assert versions.splitlines()[0].startswith(f"  {v1}") and versions.splitlines()[1].startswith(f"* {v2}")
    assert "Bash(curl *)" in run_hookbus("policy", "show", v2, HOOKBUS_REDIS_URL=redis_url).stdout
    assert "+      - Bash(curl *)" in run_hookbus("policy", "diff", v1, v2, HOOKBUS_REDIS_URL=redis_url).stdout
    rolled = run_hookbus("policy", "rollback", "--tenant", "acme", HOOKBUS_REDIS_URL=redis_url)
    assert rolled.returncode == 0 and v1 in rolled.stdout
    broken = tmp_path / "broken.yaml"
    broken.write_text("hooks:\n  PreToolUse:\n    - hooks: [{type: nope}]\n")
    refused = run_hookbus("policy", "push", str(broken), HOOKBUS_REDIS_URL=redis_url)
    assert refused.returncode == 1 and "broken.yaml:3" in refused.stderr and "Traceback" not in refused.stderr
