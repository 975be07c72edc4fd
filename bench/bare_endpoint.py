"""The baseline of ``bench/platform_cost.py``: a bare Starlette JSON endpoint on uvicorn, no Redis.

``python bench/bare_endpoint.py PORT``: ``POST /v1/hooks`` parses the JSON body and answers
``{}``, served the way the gateway is served (uvicorn, uvloop, httptools, no access log, no
server header, no proxy-headers middleware, one process).
"""

from __future__ import annotations

import sys

import orjson
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route


async def hooks(request: Request) -> Response:
    hook_input = orjson.loads(await request.body())
    if not isinstance(hook_input, dict) or "hook_event_name" not in hook_input:
        return Response(b'{"error":"not a hook input"}', status_code=400, media_type="application/json")
    return Response(b"{}", media_type="application/json")


app = Starlette(routes=[Route("/v1/hooks", hooks, methods=["POST"])])

if __name__ == "__main__":
    uvicorn.run(
        app,
        host="127.0.0.1",
        port=int(sys.argv[1]),
        loop="uvloop",
        http="httptools",
        lifespan="off",
        access_log=False,
        log_level="warning",
        server_header=False,
        proxy_headers=False,
        backlog=4096,
    )
