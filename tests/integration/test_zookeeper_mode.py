"""A broker process with `zookeeper.connect`: registration, controller, topics and cluster id
in a real ZooKeeper (under a chroot), surviving a restart; the guards that keep a second
broker or a foreign data dir out."""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from riverlog.metadata import layout
from riverlog.metadata.zookeeper import ZooKeeperStore
from tests.integration.conftest import start_broker
from tests.zookeeper_server import ZooKeeperServer


def wait_for_absence(store: ZooKeeperStore, path: str, timeout_s: float = 10) -> None:
    deadline = time.monotonic() + timeout_s
    while store.exists(path):
        assert time.monotonic() < deadline, f"{path} is still there"
        time.sleep(0.05)


def test_a_broker_keeps_its_cluster_in_zookeeper(
    zookeeper: ZooKeeperServer, tmp_path: Path
) -> None:
    connect = f"{zookeeper.connect}/riverlog-{uuid.uuid4().hex[:8]}"
    zk = ZooKeeperStore(connect)
    data = tmp_path / "b0"
    broker = start_broker(data, f"zookeeper.connect={connect}", "broker.id=0")
    try:
        host, port = broker.bootstrap_servers.split(":")
        registered = layout.BrokerRegistration.from_json(0, zk.get("/brokers/ids/0").data)
        assert [(e.host, e.port) for e in registered.endpoints] == [(host, int(port))]
        assert zk.get("/brokers/ids/0").ephemeral
        assert json.loads(zk.get("/controller").data)["brokerid"] == 0
        assert zk.get("/controller_epoch").data == b"1"
        cluster = json.loads(zk.get("/cluster/id").data)["id"]
        assert f"cluster.id={cluster}" in (data / "meta.properties").read_text()

        admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
        admin.create_topics([NewTopic("in-zk", 2, 1)])["in-zk"].result(30)
        assignment = layout.TopicAssignment.from_json(zk.get("/brokers/topics/in-zk").data)
        assert assignment.partitions == {0: [0], 1: [0]}
        producer = Producer({"bootstrap.servers": broker.bootstrap_servers})
        producer.produce("in-zk", value=b"kept", partition=1)
        assert producer.flush(15) == 0
    finally:
        broker.stop()
    wait_for_absence(zk, "/brokers/ids/0", 2)  # a clean stop ends the session at once
    assert not zk.exists("/controller")

    again = start_broker(data, f"zookeeper.connect={connect}", "broker.id=0")
    try:
        assert zk.get("/controller_epoch").data == b"2"
        consumer = Consumer({"bootstrap.servers": again.bootstrap_servers, "group.id": "zk"})
        consumer.assign([TopicPartition("in-zk", 1, 0)])
        msg = None
        deadline = time.monotonic() + 20
        while msg is None and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
        consumer.close()
        assert msg is not None and msg.value() == b"kept"
    finally:
        again.stop()
        zk.close()


def test_a_data_dir_of_another_cluster_is_refused(
    zookeeper: ZooKeeperServer, tmp_path: Path
) -> None:
    connect = f"{zookeeper.connect}/riverlog-{uuid.uuid4().hex[:8]}"
    first = start_broker(tmp_path / "b0", f"zookeeper.connect={connect}", "broker.id=0")
    first.stop()
    other = f"{zookeeper.connect}/riverlog-{uuid.uuid4().hex[:8]}"
    zk = ZooKeeperStore(other)
    zk.create("/cluster/id", json.dumps({"version": "1", "id": "someone-else"}).encode())
    zk.close()
    with pytest.raises(RuntimeError, match="did not start"):
        start_broker(tmp_path / "b0", f"zookeeper.connect={other}", "broker.id=0")
    assert "doesn't match stored clusterId" in (tmp_path / "b0.broker.log").read_text()
