"""Policy files and their distribution: parsing, validating, layering, pushing and reloading.

``schema`` holds the pydantic models of a policy file, ``loading`` parses, checks and merges
files into a :class:`~bus.policy.loading.Policy` of :class:`~bus.policy.entries.HandlerEntry`,
``compiled`` works out once what deciding needs of it (the handlers per event and tool, a
``rule`` handler's lists compiled by ``rulelists``), ``deciding`` turns the handlers' answers into
the decision (a pure function), ``layers`` composes an organisation's layer
with a tenant's, ``store`` keeps pushed versions in Redis, ``registry`` keeps the policies one
node enforces in step with Redis, ``reload`` watches the files, and ``placeholders`` fills a
handler's command from the hook input without a shell ever seeing a value.

Imports: bus.errors, bus.dialects, bus.hooks, bus.rules, bus.redaction, bus.redis, bus.runtime.
"""
