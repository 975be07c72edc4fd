"""The approval queue at the gateway: holding an agent's request for a person's answer
(``desk``), the records of how each ask ended (``records``) and ``/v1/approvals`` (``routes``).

Imports: bus, gateway.access.
"""
