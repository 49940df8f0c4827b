"""Cluster metadata: the ZooKeeper-shaped store and the znode layout riverlog keeps in it."""
