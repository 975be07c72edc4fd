"""Masking secrets before anything is stored: built-in detectors, policy masks, log lines.

The detectors (``detectors``) compiled into one regex and scanned in linear time (``scan``); a
:class:`~bus.redaction.redact.Redactor` walks JSON values and texts (``redact``). It knows nothing
of where the masked copies go: the decision log's record is :mod:`bus.decisionlog.masking`'s.

Imports: nothing in bus.
"""
