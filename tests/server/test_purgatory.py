"""The purgatory completes each delayed operation exactly once: on its condition or timeout."""

from __future__ import annotations

import asyncio

from riverlog.server.replication.purgatory import Purgatory


def test_completes_immediately_when_possible() -> None:
    async def main() -> None:
        purgatory = Purgatory()
        assert purgatory.delay(["k"], 10.0, lambda: "now", lambda: "expired") == "now"
        assert len(purgatory) == 0

    asyncio.run(main())


def test_check_wakes_the_waiter_long_before_the_timeout() -> None:
    async def main() -> None:
        purgatory = Purgatory()
        ready = False
        fut = purgatory.delay(["a", "b"], 10.0, lambda: "data" if ready else None, lambda: "x")
        assert purgatory.check("a") == 0 and not fut.done()
        ready = True
        loop = asyncio.get_running_loop()
        start = loop.time()
        assert purgatory.check("b") == 1
        assert await fut == "data"
        assert loop.time() - start < 0.5
        assert len(purgatory) == 0  # unregistered from both keys
        assert purgatory.check("a") == 0  # and never completes twice

    asyncio.run(main())


def test_timeout_answers_with_on_expire_once() -> None:
    async def main() -> None:
        purgatory = Purgatory()
        calls: list[int] = []

        def expire() -> str:
            calls.append(1)
            return "expired"

        fut = purgatory.delay(["k"], 0.01, lambda: None, expire)
        assert await fut == "expired"
        purgatory.check("k")
        purgatory.expire_all()
        assert calls == [1] and len(purgatory) == 0

    asyncio.run(main())


def test_cancelled_waiter_is_forgotten() -> None:
    async def main() -> None:
        purgatory = Purgatory()
        fut = purgatory.delay(["k"], 10.0, lambda: None, lambda: "x")
        fut.cancel()
        await asyncio.sleep(0)
        assert len(purgatory) == 0

    asyncio.run(main())


def test_expire_all_answers_everyone() -> None:
    async def main() -> None:
        purgatory = Purgatory()
        futs = [purgatory.delay([i], 10.0, lambda: None, lambda: "bye") for i in range(3)]
        purgatory.expire_all()
        assert [await f for f in futs] == ["bye"] * 3

    asyncio.run(main())


def test_many_operations_completed_early_leave_a_bounded_heap() -> None:
    async def main() -> None:
        purgatory = Purgatory()
        ready: set[int] = set()
        futs = []
        for i in range(5000):
            futs.append(
                purgatory.delay([i], 60.0, lambda i=i: "done" if i in ready else None, lambda: "x")
            )
            ready.add(i)
            assert purgatory.check(i) == 1
        assert [await f for f in futs] == ["done"] * 5000
        assert len(purgatory._deadlines) <= 2 * 1024 + 2  # dead entries are dropped
        late = purgatory.delay(["late"], 0.01, lambda: None, lambda: "expired")
        assert await late == "expired"
        assert len(purgatory) == 0

    asyncio.run(main())
