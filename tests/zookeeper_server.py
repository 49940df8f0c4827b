"""A real ZooKeeper for tests: `riverlog.devcluster`'s, which `riverlog cluster up` uses too."""

from riverlog.devcluster import ZooKeeperServer, four_letter, free_port

__all__ = ["ZooKeeperServer", "four_letter", "free_port"]
