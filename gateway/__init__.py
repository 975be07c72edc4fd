"""The hookbus gateway: the HTTP service agents talk to (contract §3)."""
