"""Session policy at run time: what a session remembers, and the conditions that read it.

``definitions`` compiles ``hookbus.session`` once per policy (each fact's and counter's field
in the session's state, the rules that set, clear and count); ``state`` reads a session's state
and judges ``when:`` conditions and budgets on it; ``effects`` says what one event changes, as
operations the settle script applies in the step that writes the event's record
(:mod:`bus.stream.settle`, its Lua in ``script``).

Imports: bus.errors, bus.hooks, bus.rules, bus.dialects, bus.policy.
"""
