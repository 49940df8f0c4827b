"""Stateful property test of PartitionLog against a model: appends, rolls, truncation,
retention, flushes, clean and unclean restarts (with torn bytes above the recovery point).

Property: the log always reads back exactly the model (appended batches minus truncated and
retained ones), in order; an unclean restart never loses a batch below the recovery point and
keeps exactly the intact batches above it."""

from __future__ import annotations

import random
import shutil
import tempfile
from pathlib import Path

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from riverlog.protocol.records.batch_header import iter_batches
from riverlog.storage.log import PartitionLog
from riverlog.storage.retention import apply_retention
from tests.storage.logtools import (
    CODECS,
    Model,
    ModelBatch,
    as_model,
    config,
    make_batch,
    model_view,
    random_recs,
    read_all,
)

CFG = config(
    segment_bytes=3000, index_interval_bytes=150, retention_ms=50_000, file_delete_delay_ms=0
)


class LogMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.tmp = Path(tempfile.mkdtemp(prefix="riverlog-prop-"))
        self.directory = self.tmp / "t-0"
        self.log = PartitionLog(self.directory, CFG)
        self.model = Model()
        self.now = 1_000_000

    def teardown(self) -> None:
        self.log.close(clean=False)
        shutil.rmtree(self.tmp, ignore_errors=True)

    # --- operations --------------------------------------------------------------------

    @rule(seed=st.integers(0, 2**32), codec=st.sampled_from(CODECS), big=st.booleans())
    def append(self, seed: int, codec: int, big: bool) -> None:
        rng = random.Random(seed)
        recs = random_recs(rng, self.now, max_records=4, max_value=400 if big else 60)
        result = self.log.append(make_batch(recs, codec=codec), leader_epoch=0, now_ms=self.now)
        assert result.first_offset == self.log_end_before_append()
        self.model.add(result.first_offset, recs)
        self.now += rng.randint(0, 5_000)

    def log_end_before_append(self) -> int:
        return self.model.batches[-1].next_offset if self.model.batches else self._empty_end

    @rule()
    def roll(self) -> None:
        self.log.roll()

    @rule()
    def flush(self) -> None:
        self.log.flush()
        assert self.log.recovery_point == self.log.log_end_offset

    @rule(data=st.data())
    def truncate(self, data: st.DataObject) -> None:
        end = self.log.log_end_offset
        target = data.draw(st.integers(max(0, self.log.log_start_offset), end))
        self.log.truncate_to(target)
        self.model.truncate_to(target)
        assert self.log.log_end_offset <= target
        if not self.model.batches:
            self._empty_end = self.log.log_end_offset

    @rule(data=st.data(), advance=st.integers(0, 100_000))
    def retention(self, data: st.DataObject, advance: int) -> None:
        self.now += advance
        log = self.log
        log.update_high_watermark(data.draw(st.integers(0, log.log_end_offset)))
        hw = log.high_watermark
        if data.draw(st.booleans()):
            log.delete_records_before(data.draw(st.integers(log.log_start_offset, hw)))
        before = log.log_start_offset
        apply_retention(log, self.now)
        log.delete_expired_files(self.now)
        assert before <= log.log_start_offset <= max(hw, before)
        self.model.keep_from(log.log_start_offset)
        if not self.model.batches:
            self._empty_end = log.log_end_offset

    @rule()
    def clean_restart(self) -> None:
        end, start = self.log.log_end_offset, self.log.log_start_offset
        self.log.close()
        self.log = PartitionLog(
            self.directory, CFG, recovery_point=end, log_start_offset=start, clean_shutdown=True
        )
        assert self.log.log_end_offset == end
        assert self.log.log_start_offset == start

    @rule(tear=st.none() | st.floats(0.0, 1.0), garbage=st.binary(max_size=80))
    def unclean_restart(self, tear: float | None, garbage: bytes) -> None:
        log = self.log
        rp, start, end = log.recovery_point, log.log_start_offset, log.log_end_offset
        active = log.active
        path = active.log_path
        # Bytes above the recovery point were never fsynced: a crash may lose or garble them.
        floor = 0
        if active.base_offset <= rp:
            floor = active.position_of(rp) if rp < active.next_offset else active.size
        log.close(clean=False)
        original = path.read_bytes()
        spans = [(pos, pos + h.size, h.base_offset) for pos, h in iter_batches(original)]
        if tear is not None:
            cut = floor + int(tear * (len(original) - floor))
            with open(path, "r+b") as f:
                f.truncate(cut)
                f.seek(cut)
                f.write(garbage)
        damaged = path.read_bytes()
        lost_from = next(
            (base for s, e, base in spans if damaged[s:e] != original[s:e]),
            None,
        )
        self.log = PartitionLog(
            self.directory, CFG, recovery_point=rp, log_start_offset=start, clean_shutdown=False
        )
        if lost_from is not None:
            assert lost_from >= rp, "torn bytes below the recovery point"
            self.model.truncate_to(lost_from)
            assert self.log.log_end_offset == lost_from
        else:
            assert self.log.log_end_offset == end
        assert self.log.log_end_offset >= min(rp, end)
        if not self.model.batches:
            self._empty_end = self.log.log_end_offset

    # --- checks ------------------------------------------------------------------------

    _empty_end = 0

    @invariant()
    def matches_model(self) -> None:
        log = self.log
        assert log.log_start_offset <= log.high_watermark <= log.log_end_offset
        assert log.recovery_point <= log.log_end_offset
        want = [(o, r) for o, r in model_view(self.model) if o + len(r) > log.log_start_offset]
        assert as_model(read_all(log)) == want
        if self.model.batches:
            assert log.log_end_offset == self.model.end
        else:
            assert log.log_end_offset == self._empty_end
        bases = [s.base_offset for s in log.segments]
        assert bases == sorted(set(bases))

    @precondition(lambda self: bool(self.model.batches))
    @invariant()
    def random_offset_reads_its_batch(self) -> None:
        batch: ModelBatch = self.model.batches[len(self.model.batches) // 2]
        if batch.next_offset <= self.log.log_start_offset:
            return
        offset = max(batch.base_offset + len(batch.recs) // 2, self.log.log_start_offset)
        got = read_all(self.log, offset)[0]
        assert got.header.base_offset == batch.base_offset


LogMachine.TestCase.settings = settings(
    max_examples=100, stateful_step_count=30, deadline=None, database=None
)
TestLog = LogMachine.TestCase
