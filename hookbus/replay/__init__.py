"""``hookbus policy replay``: what a candidate policy would have decided on recorded traffic, added up.

Imports: bus, workers.engine, workers.handlers, workers.services.
"""
