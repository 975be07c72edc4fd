"""The hookbus gateway: the HTTP service agents talk to (reference: docs/api.md)."""
