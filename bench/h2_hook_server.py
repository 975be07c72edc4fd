"""The loopback http hook of ``bench/hook_server.py`` over cleartext HTTP/2 (prior knowledge, h2c).

``python bench/h2_hook_server.py PORT``: answers every POST with an empty 200 (no opinion), or
a deny when the body holds ``rm -rf``. Runs in a process of its own, on the ``h2`` library.
"""

from __future__ import annotations

import asyncio
import sys

import h2.config
import h2.connection
import h2.events
import uvloop

DENY = (
    b'{"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"deny","permissionDecisionReason":"no"}}'
)


class H2Hook(asyncio.Protocol):
    def __init__(self) -> None:
        self.conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False, header_encoding=None))
        self.bodies: dict[int, bytearray] = {}
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  (uvloop's transports are not asyncio.Transport)
        self.conn.initiate_connection()
        transport.write(self.conn.data_to_send())

    def data_received(self, data: bytes) -> None:
        assert self.transport is not None
        try:
            events = self.conn.receive_data(data)
        except h2.exceptions.ProtocolError:
            self.transport.write(self.conn.data_to_send())
            self.transport.close()
            return
        for event in events:
            if isinstance(event, h2.events.RequestReceived):
                self.bodies[event.stream_id] = bytearray()
            elif isinstance(event, h2.events.DataReceived):
                self.bodies.setdefault(event.stream_id, bytearray()).extend(event.data)
                self.conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
            elif isinstance(event, h2.events.StreamEnded):
                body = self.bodies.pop(event.stream_id, bytearray())
                reply = DENY if b"rm -rf" in body else b""
                self.conn.send_headers(
                    event.stream_id,
                    [
                        (b":status", b"200"),
                        (b"content-type", b"application/json"),
                        (b"content-length", str(len(reply)).encode()),
                    ],
                    end_stream=not reply,
                )
                if reply:
                    self.conn.send_data(event.stream_id, reply, end_stream=True)
        self.transport.write(self.conn.data_to_send())


async def main(port: int) -> None:
    server = await asyncio.get_running_loop().create_server(H2Hook, "127.0.0.1", port)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    uvloop.run(main(int(sys.argv[1])))
