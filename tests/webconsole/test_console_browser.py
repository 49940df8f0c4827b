"""The web console in a real browser: Playwright drives Debian's Chromium (headless) through
brokers, a topic, its messages, a group with lag and its lag chart, a reset-offsets dry run,
and creating then deleting a topic; every figure on the pages is checked against the
cluster's true state as confluent-kafka reports it. Screenshots go to the test's tmp dir."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import confluent_kafka
import pytest
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic
from playwright.sync_api import Page, sync_playwright

from riverlog.embedded import EmbeddedBroker, broker
from tests.webconsole.console_harness import RunningConsole, running_console

CHROMIUM = "/usr/bin/chromium"
TOPIC, GROUP, RECORDS, CONSUMED = "orders", "billing", 30, 12
CLICKS, CLICK_RECORDS = "clicks", 40


@pytest.fixture
def cluster() -> Iterator[EmbeddedBroker]:
    with broker() as b:
        admin = AdminClient({"bootstrap.servers": b.bootstrap_servers})
        for future in admin.create_topics([NewTopic(TOPIC, 3, 1), NewTopic(CLICKS, 1, 1)]).values():
            future.result(30)
        producer = confluent_kafka.Producer({"bootstrap.servers": b.bootstrap_servers})
        for i in range(RECORDS):
            producer.produce(
                TOPIC,
                json.dumps({"order": i, "total": i * 10}).encode(),
                key=f"customer-{i}".encode(),
                partition=i % 3,
                headers=[("source", b"web")],
            )
        assert producer.flush(30) == 0
        consumer = confluent_kafka.Consumer(
            {
                "bootstrap.servers": b.bootstrap_servers,
                "group.id": GROUP,
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
            }
        )
        consumer.subscribe([TOPIC])
        consumed = dict.fromkeys(range(3), 0)
        while sum(consumed.values()) < CONSUMED:
            message = consumer.poll(10)
            assert message is not None and message.error() is None
            consumed[message.partition()] = message.offset() + 1
        # every partition gets a committed offset, so the group's lag covers all three
        commits = [confluent_kafka.TopicPartition(TOPIC, p, o) for p, o in consumed.items()]
        consumer.commit(offsets=commits, asynchronous=False)
        consumer.close()
        yield b


def true_state(bootstrap: str) -> dict[int, tuple[int, int, int]]:
    """Per partition of TOPIC: (committed offset of GROUP, low watermark, high watermark)."""
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP})
    try:
        parts = [confluent_kafka.TopicPartition(TOPIC, p) for p in range(3)]
        committed = {tp.partition: tp.offset for tp in consumer.committed(parts, timeout=10)}
        return {
            p: (committed[p], *consumer.get_watermark_offsets(parts[p], timeout=10))
            for p in range(3)
        }
    finally:
        consumer.close()


def cells(page: Page, selector: str) -> list[list[str]]:
    rows = page.locator(f"{selector} tbody tr")
    return [
        [c.strip() for c in rows.nth(i).locator("td").all_inner_texts()]
        for i in range(rows.count())
    ]


def test_console_shows_the_cluster_as_it_is(cluster: EmbeddedBroker, tmp_path: Path) -> None:
    truth = true_state(cluster.bootstrap_servers)
    lag = {p: high - committed for p, (committed, _, high) in truth.items()}
    assert sum(lag.values()) == RECORDS - CONSUMED
    shots = tmp_path / "screenshots"
    shots.mkdir()
    with running_console(cluster.bootstrap_servers) as console, sync_playwright() as pw:
        console.wait_for_samples(3)
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True)
        try:
            page = browser.new_page(viewport={"width": 1300, "height": 900})
            _brokers(page, console, shots)
            _topic_and_messages(page, truth, shots)
            _group_lag_and_reset(page, console, truth, lag, shots)
            _throughput(page, cluster, console, shots)
            _create_and_delete_topic(page, cluster, shots)
        finally:
            browser.close()
    # the dry run changed nothing
    assert true_state(cluster.bootstrap_servers) == truth
    assert sorted(p.name for p in shots.iterdir()) == [
        "brokers.png",
        "group.png",
        "messages.png",
        "reset-dry-run.png",
        "throughput.png",
        "topic-deleted.png",
        "topic.png",
    ]


def _brokers(page: Page, console: RunningConsole, shots: Path) -> None:
    page.goto(console.url + "/")
    (row,) = cells(page, "#brokers")
    assert row[0] == "0" and row[3] == "yes"  # broker 0, the controller
    assert row[4].startswith("up")
    assert int(row[5]) == 3 + 1 + 50  # leads orders, clicks and __consumer_offsets
    assert "Produce v" in row[8]
    page.screenshot(path=str(shots / "brokers.png"), full_page=True)


def _topic_and_messages(page: Page, truth: dict[int, tuple[int, int, int]], shots: Path) -> None:
    p = page
    p.get_by_role("link", name="Topics").click()
    topics = {r[0]: r for r in cells(p, "#topics")}
    assert topics[TOPIC][1:5] == ["3", "1", "0", "0"]
    assert "__consumer_offsets" not in topics  # internal topics are hidden by default
    p.get_by_role("link", name=TOPIC, exact=True).click()
    rows = cells(p, "#partitions")
    assert [(int(r[0]), int(r[1]), int(r[5]), int(r[6])) for r in rows] == [
        (part, 0, low, high) for part, (_, low, high) in sorted(truth.items())
    ]
    p.screenshot(path=str(shots / "topic.png"), full_page=True)

    p.get_by_role("link", name="Browse messages").click()
    p.select_option("select[name=partition]", "1")
    p.select_option("select[name=start]", "beginning")
    p.get_by_role("button", name="Show").click()
    shown = cells(p, "#messages")
    expected = [i for i in range(RECORDS) if i % 3 == 1]
    assert [int(r[0]) for r in shown] == list(range(len(expected)))
    assert [r[2] for r in shown] == [f"customer-{i}" for i in expected]
    assert [json.loads(r[3]) for r in shown] == [{"order": i, "total": i * 10} for i in expected]
    assert all(r[4] == "source: web" for r in shown)
    p.screenshot(path=str(shots / "messages.png"), full_page=True)

    p.fill("input[name=key]", "customer-7")
    p.select_option("select[name=format]", "hex")
    p.get_by_role("button", name="Show").click()
    (only,) = cells(p, "#messages")
    assert only[2] == b"customer-7".hex(" ")
    assert bytes.fromhex(only[3]) == json.dumps({"order": 7, "total": 70}).encode()


def _group_lag_and_reset(
    page: Page,
    console: RunningConsole,
    truth: dict[int, tuple[int, int, int]],
    lag: dict[int, int],
    shots: Path,
) -> None:
    p = page
    p.get_by_role("link", name="Consumer groups").click()
    groups = {r[0]: r for r in cells(p, "#groups")}
    assert groups[GROUP][1] == "Empty"
    assert groups[GROUP][4] == str(sum(lag.values()))
    p.get_by_role("link", name=GROUP).click()
    rows = cells(p, "#lag")
    assert [(r[0], int(r[1]), int(r[2]), int(r[3]), int(r[4])) for r in rows] == [
        (TOPIC, part, committed, high, lag[part])
        for part, (committed, _, high) in sorted(truth.items())
    ]
    # the chart is drawn by uPlot from the console's own samples; its last point is the lag now
    chart = p.locator("#lag-chart")
    chart.locator("canvas").wait_for()
    assert chart.get_attribute("data-drawn") == "true"
    data = json.loads(chart.get_attribute("data-series"))
    assert len(data["x"]) >= 3
    assert data["series"][TOPIC][-1] == sum(lag.values())
    assert console.history.samples >= 3
    p.screenshot(path=str(shots / "group.png"), full_page=True)

    p.select_option("select[name=scenario]", "earliest")
    p.get_by_role("button", name="Dry run").click()
    assert "Dry run: nothing changed" in p.locator("main h2").first.inner_text()
    plan = cells(p, "#reset-plan")
    assert [(r[0], int(r[1]), int(r[2]), int(r[3])) for r in plan] == [
        (TOPIC, part, committed, low) for part, (committed, low, _) in sorted(truth.items())
    ]
    p.screenshot(path=str(shots / "reset-dry-run.png"), full_page=True)


def _throughput(page: Page, cluster: EmbeddedBroker, console: RunningConsole, shots: Path) -> None:
    """Records produced while the console samples show up in its rates: the rates integrated
    over the sampled intervals give back the records and the bytes written."""
    before = console.history.samples
    producer = confluent_kafka.Producer({"bootstrap.servers": cluster.bootstrap_servers})
    for i in range(CLICK_RECORDS):
        producer.produce(CLICKS, b"click %d" % i)
    assert producer.flush(30) == 0
    console.wait_for_samples(before + 2)  # one sample surely after the last record
    page.get_by_role("link", name="Throughput").click()
    page.get_by_role("link", name=CLICKS, exact=True).click()
    on_disk = sum(f.stat().st_size for f in cluster.config.data_dir.glob(f"{CLICKS}-0/*.log"))
    for chart, series, written in (
        ("#messages-chart", "in", CLICK_RECORDS),
        ("#bytes-chart", "in", on_disk),
    ):
        page.locator(f"{chart} canvas").wait_for()
        data = json.loads(page.locator(chart).get_attribute("data-series") or "{}")
        x, rates = data["x"], data["series"][series]
        integral = sum(rates[i] * (x[i] - x[i - 1]) for i in range(1, len(x)))
        assert integral == pytest.approx(written, rel=1e-6)
    page.screenshot(path=str(shots / "throughput.png"), full_page=True)


def _create_and_delete_topic(page: Page, cluster: EmbeddedBroker, shots: Path) -> None:
    p = page
    p.get_by_role("link", name="Topics").click()
    p.fill("input[name=name]", "scratch")
    p.fill("input[name=partitions]", "2")
    p.fill("textarea[name=configs]", "retention.ms=3600000")
    p.get_by_role("button", name="Create topic").click()
    assert "Created topic scratch." in p.locator(".flash").inner_text()
    assert cells(p, "#configs") == [["retention.ms", "3600000"]]
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    assert len(admin.list_topics(timeout=10).topics["scratch"].partitions) == 2

    p.fill("input[name=count]", "3")
    p.get_by_role("button", name="Add partitions").click()
    assert "scratch now has 3 partitions." in p.locator(".flash").inner_text()
    assert len(cells(p, "#partitions")) == 3
    assert len(admin.list_topics(timeout=10).topics["scratch"].partitions) == 3
    p.fill("textarea[name=set]", "cleanup.policy=compact")
    p.fill("input[name=delete]", "retention.ms")
    p.get_by_role("button", name="Apply").click()
    assert cells(p, "#configs") == [["cleanup.policy", "compact"]]
    resource = ConfigResource("topic", "scratch")
    described = admin.describe_configs([resource])[resource].result(10)
    assert described["cleanup.policy"].value == "compact"
    assert described["retention.ms"].is_default

    p.fill("input[name=confirm]", "not-the-name")
    p.get_by_role("button", name="Delete topic").click()
    assert "to confirm its deletion" in p.locator(".error").inner_text()
    assert "scratch" in admin.list_topics(timeout=10).topics
    p.go_back()
    p.fill("input[name=confirm]", "scratch")
    p.get_by_role("button", name="Delete topic").click()
    assert "Deleted topic scratch." in p.locator(".flash").inner_text()
    assert "scratch" not in [r[0] for r in cells(p, "#topics")]
    assert "scratch" not in admin.list_topics(timeout=10).topics
    p.screenshot(path=str(shots / "topic-deleted.png"), full_page=True)
