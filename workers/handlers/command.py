"""Running Claude Code ``command`` hooks centrally, as real subprocesses.

Shell form runs ``/bin/sh -c <command>`` (``pwsh -NoProfile -NonInteractive -Command`` when
``shell: "powershell"``); exec form (``args`` set) spawns ``command`` directly with ``args``
as its argv, no shell. The hook input JSON goes to stdin, which is then closed; the exit code,
stdout and stderr are read by :func:`bus.hooks.output.result_from_exit`.

**Placeholders** are filled by :mod:`bus.policy.placeholders` (values never pasted into a shell
script).

**Where it runs.** Central hooks don't run on the agent's machine: the working directory is
the event's ``cwd`` only if that directory exists here, else the dispatcher's own.

**Environment.** By allowlist, never the dispatcher's whole environment (it holds service
secrets such as ``HOOKBUS_TOKENS`` or the LLM API key): the variables named in
:data:`DEFAULT_ENV_VARS` and in the handler's ``allowedEnvVars`` that the dispatcher has
(never a ``HOOKBUS_*`` one), the handler's literal ``env``, ``CLAUDE_PROJECT_DIR`` /
``CLAUDE_CODE_SESSION_ID`` / ``CLAUDE_EFFORT`` from the event, ``CLAUDECODE=1``,
``HOOKBUS_EVENT_ID`` and ``extra_env``.

**Processes.** Each hook leads its own process group. On timeout the group gets SIGTERM,
then SIGKILL once the leader exits or a 0.2 s grace ends (hooks that ignore SIGTERM: GH#86578).
When the hook exits normally, anything it left running in its group is killed too (detach
with ``setsid`` to outlive the run). Cancelling the awaiting task kills the group. Output is
read by the event loop as it arrives, so a hook that ignores stdin and floods stdout/stderr
can't deadlock; each stream keeps at most ``max_output_bytes`` (the rest is read and dropped).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from bus.hooks.output import result_from_exit
from bus.hooks.results import HandlerResult, Outcome
from bus.policy.placeholders import project_dir, render_exec, render_shell
from bus.policy.schema import CommandHandler
from bus.runtime import tracing
from bus.runtime.children import kill_with_parent
from workers.handlers.context import HookContext

#: Seconds between SIGTERM and SIGKILL for a timed-out hook's process group.
KILL_GRACE_S = 0.2
#: Seconds to wait, after the hook exited, for its stdout/stderr to reach end of file.
DRAIN_S = 0.5
#: Variables hookbus sets from the event; an inherited value is never passed on.
_EVENT_VARS = ("CLAUDE_PROJECT_DIR", "CLAUDE_CODE_SESSION_ID", "CLAUDE_EFFORT")


#: Variables a command hook gets from the dispatcher's environment without asking.
DEFAULT_ENV_VARS = frozenset(
    {
        "PATH",
        "HOME",
        "LANG",
        "LANGUAGE",
        "LC_ALL",
        "LC_CTYPE",
        "TZ",
        "TMPDIR",
        "USER",
        "LOGNAME",
        "SHELL",
        "TERM",
    }
)


def hook_env(
    hook_input: Mapping[str, Any],
    event_id: str,
    extra_env: Mapping[str, str] | None = None,
    base: Mapping[str, str] | None = None,
    allowed: Iterable[str] = (),
    literal: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The environment of a command hook for this event (see the module docstring)."""
    inherited = os.environ if base is None else base
    names = DEFAULT_ENV_VARS.union(allowed)
    env = {k: v for k, v in inherited.items() if k in names and not k.startswith("HOOKBUS_") and k not in _EVENT_VARS}
    env.update(literal or {})
    if project_dir(hook_input):
        env["CLAUDE_PROJECT_DIR"] = project_dir(hook_input)
    session_id = hook_input.get("session_id")
    if isinstance(session_id, str):
        env["CLAUDE_CODE_SESSION_ID"] = session_id.replace("\x00", "\\0")
    effort = hook_input.get("effort")
    if isinstance(effort, Mapping) and isinstance(effort.get("level"), str):
        env["CLAUDE_EFFORT"] = effort["level"]
    env["CLAUDECODE"] = "1"
    env["HOOKBUS_EVENT_ID"] = event_id
    env.update(extra_env or {})
    return env


@dataclasses.dataclass(slots=True)
class ProcessRun:
    """What :func:`run_process` saw: ``returncode`` is None when the run timed out."""

    returncode: int | None
    stdout: str
    stderr: str

    @property
    def timed_out(self) -> bool:
        return self.returncode is None


class _Capture(asyncio.SubprocessProtocol):
    """Keeps the first ``cap`` bytes of stdout and stderr; signals exit and end of output."""

    def __init__(self, loop: asyncio.AbstractEventLoop, cap: int) -> None:
        self.cap = cap
        self.data = {1: bytearray(), 2: bytearray()}
        self.exited: asyncio.Future[None] = loop.create_future()
        self.output_closed: asyncio.Future[None] = loop.create_future()
        self._open = {1, 2}

    def pipe_data_received(self, fd: int, data: bytes | str) -> None:
        buf = self.data[fd]
        room = self.cap - len(buf)
        if room > 0:
            buf += data[:room] if isinstance(data, bytes) else data[:room].encode()

    def pipe_connection_lost(self, fd: int, exc: Exception | None) -> None:
        self._open.discard(fd)
        if not self._open and not self.output_closed.done():
            self.output_closed.set_result(None)

    def process_exited(self) -> None:
        if not self.exited.done():
            self.exited.set_result(None)


def _killpg(pgid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


async def run_process(
    argv: Sequence[str],
    stdin: bytes,
    *,
    env: Mapping[str, str],
    cwd: str | None,
    timeout_s: float,
    max_output_bytes: int = 1 << 20,
) -> ProcessRun:
    """Run ``argv`` in a new process group, feeding ``stdin`` and capturing capped output.

    Spawn errors (``OSError``, ``ValueError`` for NUL bytes) propagate. On timeout or
    cancellation the whole group is killed; the leader is always reaped and pipes closed.
    """
    loop = asyncio.get_running_loop()
    if any("\x00" in part for part in (*argv, *env.keys(), *env.values())):
        raise ValueError("embedded null byte in a command argument or environment value")
    pipe = subprocess.PIPE
    spawn = asyncio.ensure_future(
        loop.subprocess_exec(
            lambda: _Capture(loop, max_output_bytes),
            *argv,
            stdin=pipe,
            stdout=pipe,
            stderr=pipe,
            env=dict(env),
            cwd=cwd,
            start_new_session=True,
            # A dispatcher killed with -9 cannot reap its hooks: the kernel kills the direct child.
            preexec_fn=kill_with_parent,
        )
    )
    try:
        transport, proto = await asyncio.shield(spawn)
    except asyncio.CancelledError:
        # Cancelling asyncio mid-spawn leaks the pipes (and can hang): finish, then clean up.
        await asyncio.wait([spawn])
        if not spawn.cancelled() and spawn.exception() is None:
            await _finish(*spawn.result())
        raise
    try:
        pgid = transport.get_pid()
        writer = transport.get_pipe_transport(0)
        if writer is not None and not writer.is_closing():
            # A hook may exit without reading its stdin (`echo ...`): the pipe is then gone,
            # which uvloop reports as RuntimeError and asyncio as a broken pipe.
            with contextlib.suppress(RuntimeError, BrokenPipeError, ConnectionResetError):
                if stdin:
                    writer.write(stdin)  # type: ignore[attr-defined]
                writer.close()  # flushes, then closes: hooks reading stdin see EOF
        await asyncio.wait([proto.exited], timeout=timeout_s)
        timed_out = not proto.exited.done()
        if timed_out:
            _killpg(pgid, signal.SIGTERM)
            await asyncio.wait([proto.exited], timeout=KILL_GRACE_S)
        _killpg(pgid, signal.SIGKILL)  # timed out, or leftovers of a finished hook
        if timed_out:
            return ProcessRun(None, "", "")
        await asyncio.wait([proto.output_closed], timeout=DRAIN_S)
        returncode = transport.get_returncode()
        assert returncode is not None
        return ProcessRun(
            returncode,
            proto.data[1].decode("utf-8", errors="replace"),
            proto.data[2].decode("utf-8", errors="replace"),
        )
    finally:
        await _finish(transport, proto)


async def _finish(transport: asyncio.SubprocessTransport, proto: _Capture) -> None:
    """Kill the group if the leader still runs, let the leader be reaped, close the pipes."""
    try:
        if not proto.exited.done():
            _killpg(transport.get_pid(), signal.SIGKILL)
            await asyncio.wait([proto.exited], timeout=1.0)
    finally:
        transport.close()


def _workdir(hook_input: Mapping[str, Any]) -> str | None:
    cwd = hook_input.get("cwd")
    return cwd if isinstance(cwd, str) and os.path.isdir(cwd) else None


async def run_command(
    handler: CommandHandler,
    event: str,
    payload: bytes,
    hook_input: Mapping[str, Any],
    *,
    timeout_s: float,
    event_id: str,
    extra_env: Mapping[str, str] | None = None,
    max_output_bytes: int = 1 << 20,
) -> HandlerResult:
    """Run one command hook on one event and read its answer the way Claude Code does.

    ``payload`` is the exact input JSON written to stdin; ``hook_input`` is its parsed form,
    used for the environment and placeholders. Never raises for hook failures: spawn errors
    and a missing ``pwsh`` are :attr:`Outcome.ERROR`, an overrun :attr:`Outcome.TIMEOUT`.
    """
    started = time.perf_counter()

    def done(result: HandlerResult, *, retryable: bool = True) -> HandlerResult:
        result.handler_type = "command"
        result.duration_s = time.perf_counter() - started
        # An exit 2 is the hook's answer, and a missing program stays missing: another try repeats them.
        result.retryable = retryable and result.outcome is not Outcome.BLOCK
        return result

    env = hook_env(hook_input, event_id, extra_env, allowed=handler.allowed_env_vars or (), literal=handler.env)
    if handler.args is not None:
        argv = render_exec(handler.command, handler.args, hook_input)
    else:
        powershell = handler.shell == "powershell"
        script, variables = render_shell(handler.command, hook_input, powershell=powershell)
        env.update(variables)
        if powershell:
            pwsh = shutil.which("pwsh", path=env.get("PATH", os.defpath))
            if pwsh is None:
                return done(
                    HandlerResult(Outcome.ERROR, reason="shell 'powershell': pwsh not found on PATH"), retryable=False
                )
            argv = [pwsh, "-NoProfile", "-NonInteractive", "-Command", script]
        else:
            argv = ["/bin/sh", "-c", script]
    try:
        run = await run_process(
            argv,
            payload,
            env=env,
            cwd=_workdir(hook_input),
            timeout_s=timeout_s,
            max_output_bytes=max_output_bytes,
        )
    except FileNotFoundError:
        return done(HandlerResult(Outcome.ERROR, reason=f"command not found: {argv[0]}"), retryable=False)
    except PermissionError:
        return done(HandlerResult(Outcome.ERROR, reason=f"permission denied: {argv[0]}"), retryable=False)
    except (OSError, ValueError) as exc:
        return done(HandlerResult(Outcome.ERROR, reason=f"cannot run {argv[0]}: {exc}"))
    if run.returncode is None:
        return done(HandlerResult(Outcome.TIMEOUT, reason=f"timed out after {timeout_s}s"))
    tracing.annotate("process.exit.code", run.returncode)
    return done(result_from_exit(event, run.returncode, run.stdout, run.stderr))


async def run(ctx: HookContext) -> HandlerResult:
    """The dispatcher's entry point for a ``command`` handler."""
    handler = ctx.entry.handler
    assert isinstance(handler, CommandHandler)
    return await run_command(
        handler,
        ctx.event,
        ctx.payload,
        ctx.hook_input,
        timeout_s=min(ctx.timeout_s, ctx.request.remaining_s()),
        event_id=ctx.request.event_id,
    )


__all__ = ["DRAIN_S", "KILL_GRACE_S", "ProcessRun", "hook_env", "run", "run_command", "run_process"]
