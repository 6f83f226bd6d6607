"""framework/interfaces.py NodeVerdicts: the constructors plugins return from
filter_nodes."""

from __future__ import annotations

import numpy as np
import pytest

from berth.framework.interfaces import NodeVerdicts
from berth.framework.status import SUCCESS, Status


@pytest.mark.parametrize("sizes", [(3, 0, 64), (5000, 2, 70000)])
def test_all_pass_is_minus_one_for_each_candidate_and_cannot_be_changed(
    sizes: tuple[int, ...],
) -> None:
    for n in sizes:
        v = NodeVerdicts.all_pass(n)
        assert v.statuses == []
        assert v.status_index.dtype == np.int32
        assert v.status_index.tolist() == [-1] * n
        assert v.passed().all() and len(v.passed()) == n
        if n:
            assert v.status_of(n - 1) is SUCCESS
            # Shared between calls: nobody may write into it.
            with pytest.raises(ValueError, match="read-only"):
                v.status_index[0] = 0


def test_uniform_success_passes_and_a_rejection_rejects_every_candidate() -> None:
    assert NodeVerdicts.uniform(4, SUCCESS).passed().all()
    no = Status.unschedulable("no")
    v = NodeVerdicts.uniform(4, no)
    assert not v.passed().any() and v.status_of(3) == no
    v.status_index[0] = -1  # its own array
    assert v.passed().tolist() == [True, False, False, False]
