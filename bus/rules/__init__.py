"""Permission rules (``Tool`` / ``Tool(specifier)``) and the shell reading behind them.

How ``if`` and ``rule`` handlers match a tool call (``permissions``; file paths in ``paths``), the wildcard patterns of
rules, matched in linear time (``globs``), a shell command line split into the simple commands a
rule is checked against, as bash reads it (``bashsplit``; the reader: ``shellparser``,
``shellcompound``, ``shellquotes``, ``shellwords``), and how much of an agent's input is read to judge it
(``limits``). Every function here is linear in the agent's input and bounded.

Imports: bus.errors.
"""
