"""`riverlog verifiable-producer` / `verifiable-consumer`: Kafka's event lines, a full round."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.integration.conftest import BrokerProcess


def _events(stdout: str) -> list[dict[str, object]]:
    return [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]


def test_verifiable_producer_then_consumer(broker_process: BrokerProcess, tmp_path: Path) -> None:
    bs = broker_process.bootstrap_servers
    subprocess.run(
        [
            sys.executable,
            "-m",
            "riverlog",
            "topics",
            "--bootstrap-server",
            bs,
            "--create",
            "--topic",
            "verify",
            "--partitions",
            "3",
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )
    config = tmp_path / "producer.properties"
    config.write_text("enable.idempotence=true\nretries=2147483647\n")
    produced = subprocess.run(
        [
            sys.executable,
            "-m",
            "riverlog",
            "verifiable-producer",
            "--bootstrap-server",
            bs,
            "--topic",
            "verify",
            "--max-messages",
            "300",
            "--value-prefix",
            "7",
            "--repeating-keys",
            "5",
            "--command-config",
            str(config),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert produced.returncode == 0, produced.stderr
    events = _events(produced.stdout)
    names = [e["name"] for e in events]
    assert names[0] == "startup_complete"
    assert names[-2:] == ["shutdown_complete", "tool_data"]
    acks = [e for e in events if e["name"] == "producer_send_success"]
    assert sorted(str(e["value"]) for e in acks) == sorted(f"7.{i}" for i in range(300))
    assert {e["key"] for e in acks} == {"0", "1", "2", "3", "4"}
    assert all(list(e)[:2] == ["timestamp", "name"] for e in events)
    assert events[-1]["sent"] == 300 and events[-1]["acked"] == 300
    where = {(e["partition"], e["offset"]) for e in acks}
    assert len(where) == 300  # every acknowledgement names its own offset

    consumed = subprocess.run(
        [
            sys.executable,
            "-m",
            "riverlog",
            "verifiable-consumer",
            "--bootstrap-server",
            bs,
            "--topic",
            "verify",
            "--group-id",
            "vc",
            "--max-messages",
            "300",
            "--verbose",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert consumed.returncode == 0, consumed.stderr
    events = _events(consumed.stdout)
    names = [e["name"] for e in events]
    assert names[0] == "startup_complete" and names[-1] == "shutdown_complete"
    assigned = next(e for e in events if e["name"] == "partitions_assigned")
    assert assigned["partitions"] == [{"topic": "verify", "partition": p} for p in range(3)]
    records = {
        (e["partition"], e["offset"]): e["value"] for e in events if e["name"] == "record_data"
    }
    assert records == {(e["partition"], e["offset"]): e["value"] for e in acks}
    summaries = [s for e in events if e["name"] == "records_consumed" for s in e["partitions"]]  # type: ignore[attr-defined]
    assert sum(s["count"] for s in summaries) == 300
    commits = [e for e in events if e["name"] == "offsets_committed"]
    assert commits and all(c["success"] for c in commits)
    last = {(o["partition"]): o["offset"] for c in commits for o in c["offsets"]}
    ends = {p: max(o for (q, o) in records if q == p) + 1 for p in range(3)}
    assert last == ends
