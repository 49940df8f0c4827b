"""Client quotas: the pure rules (rules.py), their znodes (store.py) and the broker's edge
(manager.py)."""
