"""A minimal loopback http hook for the benchmarks: deny `rm -rf`, add context to a
UserPromptSubmit, no opinion otherwise.

Runs in its own process (``python bench/hook_server.py PORT``) so that it does not share a
core's time slice with the load generator.
"""

from __future__ import annotations

import asyncio
import sys

import uvloop

DENY = (
    b'{"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"deny","permissionDecisionReason":"no"}}'
)
CONTEXT = (
    b'{"hookSpecificOutput":{"hookEventName":"UserPromptSubmit","additionalContext":"branch main, 3 files changed"}}'
)


async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n"):
                if line[:15].lower() == b"content-length:":
                    length = int(line[15:])
            body = await reader.readexactly(length)
            reply = DENY if b"rm -rf" in body else CONTEXT if b'"UserPromptSubmit"' in body else b""
            writer.write(
                b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
                + str(len(reply)).encode()
                + b"\r\n\r\n"
                + reply
            )
    except (asyncio.IncompleteReadError, ConnectionError):
        writer.close()


async def main(port: int) -> None:
    server = await asyncio.start_server(answer, "127.0.0.1", port)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    uvloop.run(main(int(sys.argv[1])))
