"""``hookbus install AGENT --check``: can the agent run its hook command, reach the gateway, and is
its token accepted?

When the installed hooks run a command (the shim, or a script that runs it), :func:`check_command`
runs that command as the agent would: through ``sh -c``, with the check event on stdin, in a
clean environment whose ``PATH`` is only :data:`MINIMAL_PATH` (an agent may start with another
``PATH`` than the shell that installed it). A command that cannot start, or that answers
without having reached the gateway (the shim then says so on stderr and fails open), is the
problem to report. :func:`check_gateway` then sends what an http hook would send: a ``POST`` to
the installed hooks URL with ``Authorization: Bearer $HOOKBUS_TOKEN``. The event is
:data:`CHECK_EVENT`, a name no agent fires: the gateway accepts an unknown event as
non-blocking, records it (it shows in ``hookbus tail``) and runs no handler for it. Then ``GET
/v1/whoami`` names the tenant the token maps to. Each answer is one line: the tenant, or the
exact problem (cannot start, unreachable, 401, 429, a URL that is not a hookbus hooks
endpoint). Standard library only.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import tomllib
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

from hookbus.install.settings_file import is_hookbus_handler
from hookbus.shim import hook_url

CHECK_EVENT = "HookbusInstallCheck"
TIMEOUT_S = 5.0
#: The ``PATH`` the installed command is run with: what every agent's environment has.
MINIMAL_PATH = "/usr/bin:/bin"
#: How long the installed command may take (its own deadline is at most 5 s).
COMMAND_TIMEOUT_S = 20.0
#: Variables passed on to the command, as an agent started from the same session would.
PASSED_ON = ("HOME", "LANG", "LC_ALL", "SSL_CERT_FILE", "SSL_CERT_DIR", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY")
#: What came of running the installed command: it answered after reaching the gateway; it ran
#: but could not reach it (the shim failed open or closed); it did not start or not finish.
CommandResult = Literal["ok", "no-gateway", "cannot-start"]
_SHIM_FAILED = re.compile(r"^hookbus: (?P<reason>.*) \(failing (?:open|closed)\)$", re.MULTILINE)


def _check_event() -> dict[str, str]:
    return {
        "hook_event_name": CHECK_EVENT,
        "session_id": "hookbus-install-check",
        "cwd": os.getcwd(),
        "transcript_path": "",
    }


def _is_shim(command: str) -> bool:
    return is_hookbus_handler({"type": "command", "command": command})


def _commands(found: Any) -> Iterator[str]:
    """Every string in a parsed hook file that runs hookbus's shim, in order."""
    if isinstance(found, str):
        if _is_shim(found):
            yield found
    elif isinstance(found, dict):
        for value in found.values():
            yield from _commands(value)
    elif isinstance(found, list):
        for value in found:
            yield from _commands(value)


def installed_command(path: Path) -> str | None:
    """The command an agent runs for the hooks in ``path`` (a JSON or TOML hook file, or a hook
    script hookbus wrote), None when they run none (http hooks, a plugin, no file)."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    if text.startswith("#!"):  # a script the agent runs itself
        shim = any(_is_shim(line.removeprefix("exec ")) for line in text.splitlines())
        return shlex.quote(str(path.absolute())) if shim else None
    try:
        parsed = tomllib.loads(text) if path.suffix == ".toml" else json.loads(text)
    except ValueError:
        return None
    return next(_commands(parsed), None)


def check_command(
    command: str, token: str | None = None, timeout_s: float = COMMAND_TIMEOUT_S
) -> tuple[CommandResult, str]:
    """Run ``command`` as an agent would (``sh -c``, the check event on stdin, ``PATH`` only
    :data:`MINIMAL_PATH`): what came of it, and one line saying so."""
    env = {name: os.environ[name] for name in PASSED_ON if name in os.environ}
    env["PATH"] = MINIMAL_PATH
    if token:
        env["HOOKBUS_TOKEN"] = token
    try:
        done = subprocess.run(
            ["/bin/sh", "-c", command],
            input=json.dumps(_check_event()).encode(),
            capture_output=True,
            env=env,
            timeout=timeout_s,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return "cannot-start", f"the installed command did not finish within {timeout_s:g}s: {command}"
    except OSError as exc:
        return "cannot-start", f"cannot run /bin/sh to try the installed command: {exc.strerror or exc}"
    err = done.stderr.decode("utf-8", "replace")
    if failed := _SHIM_FAILED.search(err):
        return "no-gateway", f"the installed command runs but does not reach the gateway: {failed['reason']}"
    if done.returncode != 0:
        last = err.strip().splitlines()[-1] if err.strip() else f"exit code {done.returncode}"
        if last.startswith("hookbus"):  # the shim ran, and says what was wrong with the answer
            return "no-gateway", f"the installed command runs, but not to a usable answer: {last}"
        return "cannot-start", (
            f"the installed command cannot start with PATH={MINIMAL_PATH} ({last}), so the agent would run "
            f"every tool unchecked: {command}"
        )
    return "ok", f"the installed command runs with PATH={MINIMAL_PATH} and reaches the gateway"


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None  # Claude Code's http hooks do not follow redirects either


def _request(
    method: str, url: str, token: str | None, body: dict[str, Any] | None, timeout_s: float
) -> tuple[int, dict[str, str], bytes]:
    headers = {"Content-Type": "application/json"} if body is not None else {}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, headers=headers, method=method)  # noqa: S310 (http(s) only)
    opener = urllib.request.build_opener(_NoRedirect)
    try:
        with opener.open(request, timeout=timeout_s) as response:
            return response.status, {k.lower(): v for k, v in response.headers.items()}, response.read(65536)
    except urllib.error.HTTPError as exc:
        return exc.code, {k.lower(): v for k, v in exc.headers.items()}, exc.read(65536)


def _detail(raw: bytes) -> str:
    try:
        found = json.loads(raw)
    except ValueError:
        return raw.decode("utf-8", "replace").strip()[:200]
    return str(found.get("detail") or found.get("error") or "") if isinstance(found, dict) else ""


def check_gateway(url: str, token: str | None = None, timeout_s: float = TIMEOUT_S) -> tuple[bool, str]:
    """``(True, "... reachable, token accepted as tenant T")`` or ``(False, the exact problem)``."""
    hooks = hook_url(url)
    token_name = "HOOKBUS_TOKEN"  # noqa: S105 (a variable name, not a secret)
    try:
        status, headers, raw = _request("POST", hooks, token, _check_event(), timeout_s)
    except TimeoutError:
        return False, f"{hooks} did not answer within {timeout_s:g}s"
    except urllib.error.URLError as exc:
        return False, f"cannot reach {hooks}: {getattr(exc, 'reason', exc)} (is the gateway running there?)"
    except OSError as exc:
        return False, f"cannot reach {hooks}: {exc}"
    if status == 401:
        if not token:
            return False, f"the gateway wants a token (401) and {token_name} is not set here"
        return False, f"the gateway refused {token_name} (401): it is not one of the gateway's tokens"
    if status == 429:
        retry = headers.get("retry-after", "?")
        return False, f"the gateway is rate-limiting this token's tenant (429, retry after {retry}s)"
    if status in (404, 405) or (300 <= status < 400):
        return False, (
            f"{hooks} is not a hookbus hooks endpoint (HTTP {status}); give the gateway's base URL, "
            "e.g. http://hookbus.internal:8787"
        )
    if status != 200:
        return False, f"{hooks} answered HTTP {status}: {_detail(raw)}"
    if "x-hookbus-outcome" not in headers:
        return False, f"{hooks} answered, but not as a hookbus gateway does (no X-Hookbus-Outcome header)"
    base = hooks.split("?", 1)[0].removesuffix("/v1/hooks")
    try:
        status, _, raw = _request("GET", f"{base}/v1/whoami", token, None, timeout_s)
        who = json.loads(raw) if status == 200 else {}
    except (OSError, ValueError):
        who = {}
    tenant = who.get("tenant") if isinstance(who, dict) else None
    if not isinstance(tenant, str):
        return True, f"{hooks} reachable, token accepted"
    if who.get("tokens") is False:
        return True, f"{hooks} reachable; the gateway checks no tokens (tenant {tenant})"
    return True, f"{hooks} reachable, token accepted as tenant {tenant}"


__all__ = ["CHECK_EVENT", "MINIMAL_PATH", "CommandResult", "check_command", "check_gateway", "installed_command"]
