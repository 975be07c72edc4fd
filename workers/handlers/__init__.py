"""The handler types, each a runner: ``async def run(ctx) -> HandlerResult``.

``command``, ``http``, ``prompt``, ``agent``, ``mcp_tool``, ``rule`` and ``function``, plus what a
runner is given (``context``), the runners by type (``runners``) and the worker threads of
synchronous ``function`` hooks (``threads``).

Imports: bus, workers.outbound, workers.services.
"""
