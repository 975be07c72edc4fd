"""Serving a process's metrics on a port of its own: ``/metrics`` (bearer token optional) and ``/healthz``.

A dispatcher or a worker started on its own (one container each) has no gateway to serve
its metrics; this small threaded server does, outside the event loop.
"""

from __future__ import annotations

import errno
import hmac
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from bus.errors import ConfigError
from bus.runtime.metrics import Metrics


def authorized(header: str | None, token: str | None) -> bool:
    """Whether an ``Authorization`` header carries ``token`` (always true when no token is set)."""
    if not token:
        return True
    scheme, _, given = (header or "").partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), token.encode())


class _Handler(BaseHTTPRequestHandler):
    token: str | None = None
    metrics: Metrics

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path == "/healthz":
            self._send(200, b'{"status": "ok"}', "application/json")
        elif path != "/metrics":
            self._send(
                404, b'{"error": "not_found", "detail": "this port serves /metrics and /healthz"}', "application/json"
            )
        elif not authorized(self.headers.get("Authorization"), self.token):
            self._send(
                401,
                b'{"error": "unauthorized", "detail": "missing or wrong metrics token"}',
                "application/json",
                {"WWW-Authenticate": "Bearer"},
            )
        else:
            body, content_type = self.metrics.render("application/openmetrics-text" in self.headers.get("Accept", ""))
            self._send(200, body, content_type)

    def _send(self, status: int, body: bytes, content_type: str, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:  # scrapes every few seconds: no access log
        pass


def start_http_server(
    metrics: Metrics, port: int | None, host: str = "127.0.0.1", token: str | None = None
) -> ThreadingHTTPServer | None:
    """Serve ``metrics`` on ``/metrics`` (bearer ``token`` when set) and ``/healthz``, in a daemon thread.

    Returns the server (``shutdown()`` stops it), or None when no port is given; a port in
    use raises ConfigError.
    """
    if not port:
        return None
    handler = type("MetricsHandler", (_Handler,), {"token": token, "metrics": metrics})
    try:
        server = ThreadingHTTPServer((host, port), handler)
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            raise ConfigError(f"metrics port {port} is in use; pass --metrics-port") from exc
        raise ConfigError(f"cannot serve metrics on {host}:{port}: {exc.strerror or exc}") from exc
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="hookbus-metrics", daemon=True).start()
    return server


__all__ = ["authorized", "start_http_server"]
