"""The central approval queue: an ``ask`` answered by a person, for the whole fleet.

``asking`` says which ``ask`` goes to the queue (a handler or matcher group marked
``approval: true``, within ``hookbus.approvals``), ``approval`` is what a pending approval holds
and the answer each outcome gives the agent, ``store`` keeps approvals in Redis per tenant
(opened, answered and expired by one script each, so two answers never both win), and
``recheck`` checks an approver's edited tool input against the policy again.

Imports: bus.errors, bus.hooks, bus.policy, bus.redis, bus.rules, bus.runtime, bus.stream.
"""
