"""Claude Code's hook semantics, to the letter.

The event catalogue and which handler types and output fields each event allows (``events``), the
hook input and output models (``models``), group ``matcher`` evaluation (``matching``), reading a
handler's answer (``output``, ``results``) and merging every answer into one output (``merge``),
in-process plugin callbacks (``plugins``) and the names of Claude Code's settings keys
(``claude_settings``). Nothing here knows about Redis, policy files or processes.

Imports: bus.errors.
"""
