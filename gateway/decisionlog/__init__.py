"""The decision log over HTTP: the live stream (Server-Sent Events), the audit export.

Both read through the one tail of the log per gateway process (``tail``).

Imports: bus, gateway.access, gateway.console.
"""
