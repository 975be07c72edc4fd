"""``hookbus hook``: the agent-side command shim (stdlib only: it starts on every tool call).

Reads one hook input JSON on stdin, asks the gateway, writes the Claude Code hook output
on stdout and exits as Claude Code expects. When the gateway is down, slow, refuses the
request (401, 429, ...) or answers with a fail-open outcome: exit 0 with no output (fail
open), or with ``--fail-closed`` exit 2 with the reason on stderr (Claude Code then blocks
the action on blocking events). An input the gateway cannot judge (too large, too deep,
untranslatable: its answer carries ``X-Hookbus-Refused``) is denied whatever the flags: the
answer is printed and the shim exits 2 with the reason on stderr. Each request carries the
shim's ``$HOME`` as ``X-Hookbus-Home``: the shim runs as the agent's user, so that is the home
``~`` stands for in the policy's path rules. For Codex, whose hooks get no exit code, a
``PostToolUse`` gets its shell command's exit code from the session's rollout
(:mod:`hookbus.shim_codex`).

Agents that read no JSON decision (Windsurf, Kiro; Auggie's PreToolUse) get the answer in
the exit-code form ``{"exit_code": 2, "stderr": REASON, "stdout": TEXT}`` from their
dialect; the shim prints ``stdout`` and ``stderr`` as text and exits with that code. Windsurf
and Kiro show or add a hook's stdout as text, so they get nothing on stdout where the others
get ``{}``.

Start-up time is the whole cost of a command hook, so this module imports nothing beyond
``sys``/``time`` (loaded with the interpreter) and ``_socket``, not even ``os`` (1 ms of a hook
started without ``site``: the environment is read from ``posix`` unless ``os`` is loaded): plain
``http://`` URLs are spoken with a minimal HTTP/1.1 client (one request, ``Connection:
close``). ``urllib.request`` (30 ms of imports) is only loaded for ``https://`` URLs, URLs
with credentials, or when a ``http_proxy`` variable is set (it then applies the proxy and
``no_proxy`` rules). A non-empty reply is read by :mod:`hookbus.shim_json`, not ``json`` (whose
``re`` and ``enum`` cost 7 ms of a hook started without ``site``). The installed command
(:mod:`hookbus.shim_start`) runs :func:`start`, which also skips the interpreter's finalization.
"""

import sys
import time

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs milliseconds on every hook
if TYPE_CHECKING:
    from typing import Any
if TYPE_CHECKING or __package__:
    from hookbus.shim_json import json_object
else:  # loaded by shim_start.py from the package folder, without the package
    from shim_json import json_object

DEFAULT_URL = "http://127.0.0.1:8787/v1/hooks"
_MAX_REPLY = 8 << 20


def environ(name: str) -> str | None:
    """``os.environ.get(name)``, without importing ``os`` when nothing has yet (the installed command)."""
    if "os" not in sys.modules:  # else os.environ, which putenv updates and posix's copy does not
        try:
            import posix
        except ImportError:  # not POSIX
            pass
        else:
            codec = sys.getfilesystemencoding(), sys.getfilesystemencodeerrors()
            value = posix.environ.get(name.encode(*codec))
            return None if value is None else value.decode(*codec)
    import os

    return os.environ.get(name)


def hook_url(url: str | None) -> str:
    """The ``/v1/hooks`` URL for ``url`` (a base URL or the full one; default ``$HOOKBUS_URL``)."""
    url = url or environ("HOOKBUS_URL") or DEFAULT_URL
    base, _, query = url.partition("?")
    base = base.rstrip("/")  # the gateway serves /v1/hooks, not /v1/hooks/
    if not base.endswith("/v1/hooks"):
        base += "/v1/hooks"
    return f"{base}?{query}" if query else base


def _split(url: str) -> tuple[str, int, str] | None:
    """``(host, port, target)`` of a plain ``http://`` URL, or None when urllib must handle it."""
    scheme, sep, rest = url.partition("://")
    if sep != "://" or scheme.lower() != "http":
        return None
    netloc, slash, path = rest.partition("/")
    netloc = netloc.split("#")[0]
    if "@" in netloc or not netloc:
        return None
    host, port = netloc, "80"
    if netloc.startswith("["):
        host, _, after = netloc[1:].partition("]")
        port = after[1:] if after.startswith(":") else "80"
    elif ":" in netloc:
        host, _, port = netloc.rpartition(":")
    if not port.isdigit():
        raise ValueError(f"bad port in {url!r}")
    return host, int(port), slash + path.split("#")[0] if slash else "/"


def _connect(host: str, port: int, timeout_s: float) -> "Any":
    """A connected TCP socket. Built on ``_socket``: ``import socket`` alone costs ~4 ms (its
    enum conversions), and a ``bytes`` host skips loading the ``idna`` codec."""
    try:
        import _socket as sockets
    except ImportError:  # not CPython
        import socket as sockets  # type: ignore[no-redef]
    name = host.encode("ascii") if host.isascii() else host.encode("idna")
    error: OSError = OSError(f"cannot resolve {host}")
    for family, kind, proto, _, address in sockets.getaddrinfo(name, port, 0, sockets.SOCK_STREAM):
        sock = sockets.socket(family, kind, proto)
        try:
            sock.settimeout(timeout_s)
            sock.connect(address)
            return sock
        except OSError as exc:
            sock.close()
            error = exc
    raise error


def _post_plain(
    host: str, port: int, target: str, body: bytes, headers: dict[str, str], timeout_s: float
) -> tuple[int, dict[str, str], bytes]:
    deadline = time.monotonic() + timeout_s
    host_header = f"[{host}]" if ":" in host else host
    lines = [
        f"POST {target} HTTP/1.1",
        f"Host: {host_header}:{port}",
        f"Content-Length: {len(body)}",
        "Connection: close",
        *(f"{k}: {v}" for k, v in headers.items()),
    ]
    request = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body
    sock = _connect(host, port, timeout_s)
    try:
        sock.sendall(request)
        data = bytearray()
        head_end = -1
        length: int | None = None
        while True:
            if head_end < 0:
                head_end = data.find(b"\r\n\r\n")
                if head_end >= 0:
                    status, reply_headers = _parse_head(bytes(data[:head_end]))
                    length = _body_length(reply_headers)
            if length is not None and len(data) >= head_end + 4 + length:
                break
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"no complete reply within {timeout_s:g}s")
            sock.settimeout(remaining)
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
            if len(data) > _MAX_REPLY:
                raise OSError("reply too large")
    finally:
        sock.close()
    if head_end < 0:
        raise ConnectionError("the gateway closed the connection without a reply")
    raw = bytes(data[head_end + 4 :])
    if reply_headers.get("transfer-encoding", "").lower() == "chunked":
        raw = _unchunk(raw)
    elif length is not None:
        if len(raw) < length:
            raise ConnectionError("the gateway closed the connection mid-reply")
        raw = raw[:length]
    return status, reply_headers, raw


def _parse_head(head: bytes) -> tuple[int, dict[str, str]]:
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    parts = status_line.split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/") or not parts[1].isdigit():
        raise ConnectionError(f"not an HTTP reply: {status_line[:80]!r}")
    headers: dict[str, str] = {}
    for line in header_lines:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return int(parts[1]), headers


def _body_length(headers: dict[str, str]) -> int | None:
    if headers.get("transfer-encoding", "").lower() == "chunked":
        return None
    value = headers.get("content-length", "")
    return int(value) if value.isdigit() else None


def _unchunk(raw: bytes) -> bytes:
    out = bytearray()
    while True:
        size_line, sep, raw = raw.partition(b"\r\n")
        if not sep:
            raise ConnectionError("truncated chunked reply")
        size = int(size_line.split(b";")[0].strip() or b"0", 16)
        if size == 0:
            return bytes(out)
        out += raw[:size]
        raw = raw[size + 2 :]


def _post_urllib(url: str, body: bytes, headers: dict[str, str], timeout_s: float) -> tuple[int, dict[str, str], bytes]:
    import urllib.error
    import urllib.request

    request = urllib.request.Request(url, data=body, headers=headers, method="POST")  # noqa: S310
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:  # noqa: S310
            return response.status, {k.lower(): v for k, v in response.headers.items()}, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, {k.lower(): v for k, v in exc.headers.items()}, exc.read()
    except urllib.error.URLError as exc:
        reason = exc.reason
        raise reason if isinstance(reason, OSError) else ConnectionError(str(reason)) from exc


def post(url: str, body: bytes, token: str | None, timeout_s: float) -> tuple[int, dict[str, str], bytes]:
    """POST ``body`` to ``url``: ``(status, lower-cased headers, body)``; raises OSError/ValueError."""
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    # The longest the gateway may hold the request for a person's answer (hookbus.approvals): under our timeout.
    headers["X-Hookbus-Hold-Seconds"] = f"{max(0.0, timeout_s - 1.0):g}"
    if environ("HOOKBUS_HEADLESS") or "".lower() in ("1", "true", "yes"):
        headers["X-Hookbus-Headless"] = "1"  # no person at the agent: an ask goes to the approval queue
    home = environ("HOME") or ""
    if home.startswith("/") and home.isascii() and home.isprintable():
        headers["X-Hookbus-Home"] = home  # the agent's home: what ~ in the policy's path rules stands for
    target = _split(url)
    if target is None or environ("http_proxy") or environ("HTTP_PROXY"):
        return _post_urllib(url, body, headers, timeout_s)
    return _post_plain(*target, body, headers, timeout_s)


#: The agents ``--agent`` names (their dialects); ``claude`` is the default.
AGENTS = (
    "claude",
    "gemini",
    "codex",
    "copilot",
    "qwen",
    "cline",
    "droid",
    "opencode",
    "cursor",
    "windsurf",
    "kiro",
    "auggie",
    "peri",
)


#: Agents that read no JSON decision: the gateway answers them in the exit-code form
#: ``{"exit_code": 2, "stderr": ..., "stdout": ...}``, which the shim carries out.
EXIT_CODE_AGENTS = ("windsurf", "kiro", "auggie")
#: Agents that show or add the hook's stdout as text: failing open, they get nothing, not ``{}``.
SILENT_AGENTS = ("windsurf", "kiro")


def agent_url(url: str, agent: str) -> str:
    """``url`` with ``dialect=AGENT`` in its query (unchanged for Claude Code)."""
    if agent == "claude":
        return url
    return f"{url}{'&' if '?' in url else '?'}dialect={agent}"


def _fail(reason: str, fail_closed: bool, agent: str = "claude") -> int:
    # Every agent blocks on exit 2 with the reason on stderr and nothing on stdout. Failing
    # open, the others get an empty JSON object: Gemini CLI and Qwen Code read stderr as the
    # answer when stdout is empty.
    if fail_closed:
        sys.stderr.write(f"hookbus: {reason} (failing closed)\n")
        return 2
    sys.stderr.write(f"hookbus: {reason} (failing open)\n")
    if agent != "claude" and agent not in SILENT_AGENTS:
        sys.stdout.write("{}\n")
        sys.stdout.flush()
    return 0


def run_hook(
    url: str | None, timeout_s: float, fail_closed: bool, stdin: bytes | None = None, agent: str = "claude"
) -> int:
    """Forward stdin (or ``stdin``) to the gateway, print its answer; returns the exit code to use.

    ``agent`` names the dialect the gateway translates from and back (``claude`` is Claude Code).
    """
    url = agent_url(hook_url(url), agent)
    body = sys.stdin.buffer.read() if stdin is None else stdin
    if agent == "codex":
        body = _with_exit_code(body)
    try:
        status, headers, answer = post(url, body, environ("HOOKBUS_TOKEN"), timeout_s)
    except TimeoutError:
        return _fail(f"gateway at {url} did not answer within {timeout_s:g}s", fail_closed, agent)
    except (OSError, ValueError) as exc:
        return _fail(f"gateway unreachable at {url}: {exc or type(exc).__name__}", fail_closed, agent)
    except Exception as exc:  # http.client oddities: still never a traceback for Claude Code
        return _fail(f"gateway unreachable at {url}: {type(exc).__name__}: {exc}", fail_closed, agent)
    if not 200 <= status < 300:
        detail = answer.decode("utf-8", "replace").strip()[:500]
        return _fail(f"gateway answered {status}: {detail}", fail_closed, agent)
    if headers.get("x-hookbus-outcome") == "fail-open":
        return _fail("gateway could not decide in time", fail_closed, agent)
    refused = headers.get("x-hookbus-refused")
    if refused is not None:
        return _refused(answer.strip(), refused, agent)
    answer = answer.strip()
    if answer in (b"", b"{}"):
        if agent != "claude" and agent not in SILENT_AGENTS:
            sys.stdout.write("{}\n")
        return 0
    output = json_object(answer)
    if output is None:
        return _fail("gateway sent a reply that is not a JSON object", fail_closed, agent)
    if agent in EXIT_CODE_AGENTS and ("exit_code" in output or "stderr" in output or "stdout" in output):
        return _carry_out(output)
    sys.stdout.buffer.write(answer + b"\n")
    sys.stdout.flush()
    return 0


def _with_exit_code(body: bytes) -> bytes:
    """Codex's input with its shell command's exit code added (:mod:`hookbus.shim_codex`); as it was on any fault."""
    try:
        if TYPE_CHECKING or __package__:
            from hookbus.shim_codex import with_exit_code
        else:  # as shim_start.py loads this module: the package folder on sys.path for the import only
            sys.path.insert(0, __file__.rpartition("/")[0])
            try:
                from shim_codex import with_exit_code
            finally:
                del sys.path[0]
        return with_exit_code(body)
    except Exception:  # never a hook lost to it: the input goes as Codex sent it
        return body


def _refused(answer: bytes, why: str, agent: str) -> int:
    """The gateway could not judge the input and denied it: print its answer (the deny in the
    agent's format, which agents that ignore exit codes read) and exit 2 (which blocks the
    others, whatever the event), with the reason on stderr."""
    if agent in EXIT_CODE_AGENTS:
        answer = b""  # their answer is the exit-code form: exit 2 with the reason says it
    elif answer not in (b"", b"{}"):
        sys.stdout.buffer.write(answer + b"\n")
        sys.stdout.flush()
    sys.stderr.write(f"hookbus cannot judge this hook input, so it is denied: {why}\n")
    return 2


def _carry_out(answer: dict[str, "Any"]) -> int:
    """Print an exit-code-form answer's ``stdout`` and ``stderr``; its exit code (0 or 2)."""
    stdout, stderr = answer.get("stdout"), answer.get("stderr")
    if isinstance(stdout, str) and stdout:
        sys.stdout.write(stdout if stdout.endswith("\n") else stdout + "\n")
        sys.stdout.flush()
    if isinstance(stderr, str) and stderr:
        sys.stderr.write(stderr if stderr.endswith("\n") else stderr + "\n")
        sys.stderr.flush()
    return 2 if answer.get("exit_code") == 2 else 0


def parse_args(argv: list[str]) -> tuple[str | None, float, bool, str] | None:
    """``(url, timeout_s, fail_closed, agent)`` from ``hook``'s arguments; None if argparse must handle them."""
    url: str | None = None
    timeout_s = 5.0
    fail_closed = False
    agent = "claude"
    args = iter(argv)
    for arg in args:
        name, eq, value = arg.partition("=")
        if name in ("--url", "--timeout", "--agent") and not eq:
            value = next(args, "")
            if not value or value.startswith("-"):
                return None
        if name == "--url":
            url = value
        elif name == "--agent":
            if value.lower() not in AGENTS:
                return None
            agent = value.lower()
        elif name == "--timeout":
            try:
                timeout_s = float(value)
            except ValueError:
                return None
            if not timeout_s > 0:
                return None
        elif arg == "--fail-closed":
            fail_closed = True
        else:
            return None
    return url, timeout_s, fail_closed, agent


def main(argv: list[str]) -> int | None:
    """Run ``hookbus hook ARGV``; None when the arguments need argparse (help, errors)."""
    parsed = parse_args(argv)
    if parsed is None:
        return None
    url, timeout_s, fail_closed, agent = parsed
    return run_hook(url, timeout_s, fail_closed, agent=agent)


USAGE = "usage: shim_start.py hook [--url URL] [--timeout S] [--fail-closed] [--agent AGENT]"


def start(argv: list[str]) -> None:
    """Run the installed hook command's arguments ``argv`` (``hook`` first) and exit; never returns.

    Arguments the shim does not parse (``--help``, a typo) get a one-line message and exit 2: the
    argparse help needs the whole command line, ``hookbus hook --help``.
    """
    code = main(argv[1:]) if argv[:1] == ["hook"] else None
    if code is None:
        sys.stderr.write(f"hookbus: cannot run the hook with arguments {argv!r}\n{USAGE}\n")
        code = 2
    # Then exit without finalizing the interpreter (every module, the collector's last passes):
    # 1.5 ms of a hook, for nothing it needs; it holds no file but stdout and stderr and runs no
    # atexit handler. A flush that fails (the agent closed the pipe) exits the ordinary way,
    # which reports it as before.
    try:
        import posix

        sys.stdout.flush()
        sys.stderr.flush()
    except (ImportError, OSError, ValueError):
        sys.exit(code)
    posix._exit(code)


__all__ = [
    "AGENTS",
    "DEFAULT_URL",
    "EXIT_CODE_AGENTS",
    "SILENT_AGENTS",
    "agent_url",
    "hook_url",
    "main",
    "parse_args",
    "post",
    "run_hook",
    "start",
]
