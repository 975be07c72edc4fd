"""``hookbus audit``: export a window of the decision log, or follow it into a sink.

Imports: bus, workers.outbound.
"""
