"""berth.kube.flowcontrol: client-go's token bucket (util/flowcontrol/throttle.go), which the
shim's writes and the benchmark's pod creator both pass."""

from __future__ import annotations

import threading

import pytest

from berth.kube.flowcontrol import TokenBucket


def test_it_spends_its_burst_then_paces_at_the_qps() -> None:
    bucket = TokenBucket(10.0, 3, now=0.0)
    assert [bucket.reserve(now=0.0) for _ in range(3)] == [0.0, 0.0, 0.0]
    assert bucket.reserve(now=0.0) == pytest.approx(0.1)  # the 4th waits a tenth of a second
    assert bucket.reserve(now=0.0) == pytest.approx(0.2)
    # 1 s later 10 tokens accrued, minus the 2 taken ahead: at most the burst is saved.
    assert bucket.reserve(now=1.0) == 0.0
    assert bucket.reserve(now=100.0) == 0.0
    assert [bucket.reserve(now=100.0) for _ in range(2)] == [0.0, 0.0]
    assert bucket.reserve(now=100.0) == pytest.approx(0.1)


@pytest.mark.parametrize("qps", [0.0, -1.0], ids=["zero", "negative"])
def test_a_qps_of_zero_or_less_means_no_limit(qps: float) -> None:
    bucket = TokenBucket(qps, 1, now=0.0)
    assert [bucket.reserve(now=0.0) for _ in range(1000)] == [0.0] * 1000


def test_a_burst_below_one_still_saves_one_token() -> None:
    bucket = TokenBucket(10.0, 0, now=0.0)
    assert bucket.reserve(now=0.0) == 0.0
    assert bucket.reserve(now=0.0) == pytest.approx(0.1)


def test_threads_share_the_tokens() -> None:
    bucket = TokenBucket(1.0, 50, now=0.0)
    waits: list[float] = []
    lock = threading.Lock()

    def take() -> None:
        for _ in range(25):
            wait = bucket.reserve(now=0.0)
            with lock:
                waits.append(wait)

    threads = [threading.Thread(target=take) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # 100 tokens taken at once from a burst of 50: the other 50 wait 1 s, 2 s, ... 50 s.
    assert sorted(waits) == pytest.approx([0.0] * 50 + [float(i) for i in range(1, 51)])
