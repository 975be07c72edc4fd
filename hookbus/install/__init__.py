"""``hookbus install claude``: connect Claude Code to a gateway, and check that it can reach it.

Imports: bus, hookbus.shim.
"""
