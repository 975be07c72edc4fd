"""Permission rules (``Tool`` / ``Tool(specifier)``) and the shell reading behind them.

How ``if`` and ``rule`` handlers match a tool call (``permissions``; file paths in ``paths``), the wildcard patterns of
rules, matched in linear time (``globs``), and how much of an agent's input is read to judge it
(``limits``). A shell command goes through two stages: READ, once per command, into plain data
(``shellread``: split as bash reads it by ``bashsplit`` with ``shellparser``, ``shellcompound``,
``shellquotes``, ``shellwords``; each subcommand's readings by ``readings``, ``launchers``,
``codereadings``, ``heredocs``, ``spellings``, ``knownvars``), then MATCH (``shellrules``, and the
compiled lists of ``bus.policy.rulelists``), which never reads the command again. Every
function here is linear in the agent's input and bounded.

Imports: bus.errors.
"""
