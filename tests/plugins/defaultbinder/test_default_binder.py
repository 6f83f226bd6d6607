"""DefaultBinder: the caller binds; the plugin answers Success for every pod
(upstream default_binder_test.go checks the Binding it POSTs; here that POST
is the caller's, so the contract is Success plus ``caller_binds``)."""

from __future__ import annotations

import pytest

from berth.framework.interfaces import BindPlugin
from berth.framework.model import PodInfo
from berth.framework.testing import fresh_state, make_pod
from berth.plugins.defaultbinder import DefaultBinder


def test_default_binder_leaves_the_binding_post_to_the_caller() -> None:
    assert issubclass(DefaultBinder, BindPlugin)
    assert DefaultBinder.caller_binds is True
    assert DefaultBinder.name == "DefaultBinder"


@pytest.mark.parametrize(
    "pod",
    [
        pytest.param(make_pod("p").info(), id="plain pod"),
        pytest.param(make_pod("q", "kube-system").priority(1000).info(), id="other namespace"),
    ],
)
def test_bind_answers_success_never_skip(pod: PodInfo) -> None:
    st = DefaultBinder().bind(fresh_state(), pod, "node-1")
    assert st.is_success and not st.is_skip
