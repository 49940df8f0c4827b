"""Client quotas against a real broker process with real confluent-kafka producers: a
producer limited to 1 MiB/s by a client-id quota (set with `riverlog configs`) is held there
over 30 s (+-10%, the first second included) and told so by `throttle_time_ms`
(librdkafka's `throttle_cb`); an unlimited producer beside it is not; raising the quota with
AlterClientQuotas applies without a restart; the quota metrics show the throttle. ~60 s."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from prometheus_client.parser import text_string_to_metric_families

from riverlog.client.connection import connect_any
from riverlog.devcluster import free_port
from riverlog.protocol import messages as m
from tests.cluster_harness import wait_until
from tests.integration.conftest import start_broker

QUOTA = 1_048_576
VALUE = b"q" * 10_000


class Load(threading.Thread):
    """One producer sending 10 kB records as fast as it may; delivered bytes by time."""

    def __init__(self, bootstrap: str, client_id: str, topic: str) -> None:
        super().__init__(daemon=True)
        self.topic = topic
        self.delivered: list[tuple[float, int]] = []
        self.throttles: list[int] = []
        self.stop = threading.Event()
        self.producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "client.id": client_id,
                "linger.ms": 5,
                "acks": 1,
                "queue.buffering.max.kbytes": 4096,
                "throttle_cb": lambda event: self.throttles.append(event.throttle_time),
            }
        )

    def _done(self, err: object, msg: object) -> None:
        if err is None:
            self.delivered.append((time.monotonic(), len(VALUE)))

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                self.producer.produce(self.topic, VALUE, on_delivery=self._done)
            except BufferError:
                self.producer.poll(0.05)
            self.producer.poll(0)
        self.producer.flush(30)

    def rate(self, start: float, end: float) -> float:
        return sum(n for t, n in self.delivered if start <= t < end) / (end - start)


def configs(bootstrap: str, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "riverlog", "configs", "--bootstrap-server", bootstrap, *args],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def scrape(port: int) -> dict[tuple[str, str], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    return {
        (s.name, s.labels.get("client_id", "")): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


async def alter_quota(bootstrap: str, client_id: str, value: float) -> None:
    conn = await connect_any(bootstrap)
    try:
        entity = m.AlterClientQuotasRequest.EntityData(
            entity_type="client-id", entity_name=client_id
        )
        op = m.AlterClientQuotasRequest.OpData(key="producer_byte_rate", value=value)
        response = await conn.send(
            m.AlterClientQuotasRequest(
                entries=[m.AlterClientQuotasRequest.EntryData(entity=[entity], ops=[op])]
            )
        )
        assert isinstance(response, m.AlterClientQuotasResponse)
        assert [e.error_code for e in response.entries] == [0]
    finally:
        await conn.close()


def test_a_client_id_quota_holds_a_producer_and_spares_the_other(tmp_path: Path) -> None:
    port = free_port()
    broker = start_broker(tmp_path / "data", f"metrics.listener=http://127.0.0.1:{port}")
    log = tmp_path / "data.broker.log"
    try:
        bootstrap = broker.bootstrap_servers
        admin = AdminClient({"bootstrap.servers": bootstrap})
        for future in admin.create_topics([NewTopic(t, 1, 1) for t in ("a", "b")]).values():
            future.result(30)
        out = configs(
            bootstrap,
            *("--entity-type", "clients", "--entity-name", "limited", "--alter"),
            *("--add-config", f"producer_byte_rate={QUOTA}"),
        )
        assert out.strip() == "Completed updating config for client limited."
        out = configs(bootstrap, "--entity-type", "clients", "--describe")
        assert (
            out.strip()
            == f"Quota configs for client-id 'limited' are producer_byte_rate={float(QUOTA)}"
        )
        wait_until(lambda: "clients/limited" in log.read_text(), 10, "the broker took the quota")

        limited, free = Load(bootstrap, "limited", "a"), Load(bootstrap, "free", "b")
        started = time.monotonic()
        limited.start()
        free.start()
        time.sleep(30)  # the measured window itself, not a synchronisation
        held = limited.rate(started, started + 30)
        unlimited = free.rate(started, started + 30)
        print(f"limited {held / QUOTA:.3f} x quota, free {unlimited / QUOTA:.1f} x quota")
        assert abs(held - QUOTA) <= 0.1 * QUOTA
        assert max(limited.throttles, default=0) > 0
        assert unlimited > 3 * QUOTA
        assert not any(free.throttles)
        metrics = scrape(port)
        assert metrics[("kafka_server_produce_throttle_time", "limited")] > 0
        assert ("kafka_server_produce_throttle_time", "free") not in metrics

        asyncio.run(alter_quota(bootstrap, "limited", 8 * QUOTA))
        wait_until(
            lambda: "'producer_byte_rate': 8388608.0" in log.read_text(), 10, "the new quota"
        )
        raised = time.monotonic()
        time.sleep(8)  # measured
        faster = limited.rate(raised, raised + 8)
        print(f"after raising the quota: {faster / QUOTA:.2f} x the old quota")
        assert faster > 2 * QUOTA
    finally:
        for load in ("limited", "free"):
            thread = locals().get(load)
            if isinstance(thread, Load):
                thread.stop.set()
                thread.join(60)
        broker.stop()
