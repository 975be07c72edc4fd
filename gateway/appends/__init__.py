"""Appending events to the streams: auto-pipelined appends, and a spool while Redis is down.

Imports: bus.
"""
