"""The decision log over HTTP: the live stream (Server-Sent Events), the audit export, SQL over the archive.

The stream and the export read through the one tail of the log per gateway process (``tail``);
``archive`` answers SQL over the audit archive's files and the log's unarchived tail.

Imports: bus, gateway.access, gateway.console.
"""
