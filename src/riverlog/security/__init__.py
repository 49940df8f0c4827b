"""Kafka's security model: listeners and their protocols, TLS, SASL, principals and ACLs.

Each module is small and owns one part; the broker wires them (server/broker.py) and the
network layer calls narrow hooks (a listener's TLS context, a connection's SASL session, the
dispatcher's authorization check).
"""
