"""Status: the result of every plugin call.

The codes and their meaning are upstream's framework.Code
(staging/src/k8s.io/kube-scheduler/framework/interface.go): the integer
values are the same, and they equal berth.v1.Code on the wire.
"""

from __future__ import annotations

import enum
from collections import Counter
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass


class Code(enum.IntEnum):
    # The plugin ran correctly and found the pod schedulable (or had nothing to say).
    SUCCESS = 0
    # An internal error: the pod is retried with backoff.
    ERROR = 1
    # The plugin found the pod unschedulable on this node; preemption may help.
    UNSCHEDULABLE = 2
    # Unschedulable, and preempting pods on this node would not help.
    UNSCHEDULABLE_AND_UNRESOLVABLE = 3
    # Permit: the pod waits for an allow or a rejection. PreBind: the plugin
    # waits for something outside the scheduler; the caller calls PreBind
    # again after the delay the plugin asked for (CycleState.recheck_pre_bind_after).
    WAIT = 4
    # PreFilter/PreScore: this plugin has nothing to do for the pod; its
    # Filter/Score is skipped. Bind: this plugin does not bind the pod.
    SKIP = 5
    # The pod waits for something outside the scheduler; it is not retried
    # until an event moves it.
    PENDING = 6


_REJECTED = frozenset({Code.UNSCHEDULABLE, Code.UNSCHEDULABLE_AND_UNRESOLVABLE, Code.PENDING})
# The members the predicates below compare with, as module globals: reading
# an enum member off its class goes through the enum's metaclass (some 0.1 µs
# on Python 3.11), and a cycle asks these of every plugin's status.
_SUCCESS, _SKIP, _WAIT = Code.SUCCESS, Code.SKIP, Code.WAIT


@dataclass(frozen=True, slots=True)
class Status:
    """A plugin's verdict, with the reasons a user reads in events."""

    code: Code = Code.SUCCESS
    reasons: tuple[str, ...] = ()
    plugin: str = ""

    @classmethod
    def success(cls) -> Status:
        return SUCCESS

    @classmethod
    def error(cls, message: str, plugin: str = "") -> Status:
        return cls(Code.ERROR, (message,), plugin)

    @classmethod
    def unschedulable(cls, *reasons: str, plugin: str = "") -> Status:
        return cls(Code.UNSCHEDULABLE, reasons, plugin)

    @classmethod
    def unresolvable(cls, *reasons: str, plugin: str = "") -> Status:
        return cls(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, reasons, plugin)

    @classmethod
    def wait(cls, *reasons: str, plugin: str = "") -> Status:
        """Permit: the pod waits for an allow or a rejection. PreBind, with
        ``CycleState.recheck_pre_bind_after``: call PreBind again later."""
        return cls(Code.WAIT, reasons, plugin)

    @classmethod
    def skip(cls) -> Status:
        return SKIP

    @property
    def is_success(self) -> bool:
        return self.code is _SUCCESS

    @property
    def is_skip(self) -> bool:
        return self.code is _SKIP

    @property
    def is_wait(self) -> bool:
        return self.code is _WAIT

    @property
    def is_rejected(self) -> bool:
        """Unschedulable, UnschedulableAndUnresolvable or Pending (upstream's IsRejected)."""
        return self.code in _REJECTED

    @property
    def message(self) -> str:
        """The reasons joined with ", " (upstream's Status.Message)."""
        return ", ".join(self.reasons)

    def with_plugin(self, plugin: str) -> Status:
        if self.plugin == plugin:
            return self
        return Status(self.code, self.reasons, plugin)

    def __str__(self) -> str:
        text = self.code.name
        if self.plugin:
            text += f" from {self.plugin}"
        if self.reasons:
            text += f": {self.message}"
        return text


SUCCESS = Status()
SKIP = Status(Code.SKIP)


def count_statuses(statuses: Collection[Status]) -> list[tuple[Status, int]]:
    """Each distinct Status object among ``statuses`` with how many times it
    occurs, in the order first met. Distinct by identity: a batch Filter's
    verdicts share one Status object among all the nodes it rejects for one
    reason, so a failed cycle over thousands of nodes has a handful of them
    (counted here in C, where a set of them would hash each by value)."""
    counts = Counter(map(id, statuses))
    # Each distinct object, looked for until all are found: most often they
    # all show up among the first few.
    missing = set(counts)
    objects: dict[int, Status] = {}
    for st in statuses:
        key = id(st)
        if key in missing:
            objects[key] = st
            missing.discard(key)
            if not missing:
                break
    return [(objects[key], n) for key, n in counts.items()]


def fit_error_message(
    num_all_nodes: int,
    rejected: Mapping[str, Status],
    pre_filter_msg: str = "",
    post_filter_msg: str = "",
    absent_status: Status | None = None,
) -> str:
    """Upstream's FitError.Error (pkg/scheduler/framework/types.go): "0/N nodes
    are available: <PreFilterMsg>. <reason histogram>. <PostFilterMsg>"."""
    return fit_error_message_counted(
        num_all_nodes,
        count_statuses(rejected.values()),
        pre_filter_msg,
        post_filter_msg,
        absent_status,
    )


def fit_error_message_counted(
    num_all_nodes: int,
    counted: Sequence[tuple[Status, int]],
    pre_filter_msg: str = "",
    post_filter_msg: str = "",
    absent_status: Status | None = None,
) -> str:
    """``fit_error_message`` from the rejected nodes' statuses with how many
    nodes each rejected (``count_statuses``)."""
    msg = f"0/{num_all_nodes} nodes are available:"
    if pre_filter_msg:
        msg += f" {pre_filter_msg}."
    else:
        counts: dict[str, int] = {}
        for st, n in counted:
            for reason in st.reasons:
                counts[reason] = counts.get(reason, 0) + n
        rejected = sum(n for _, n in counted)
        if absent_status is not None and rejected < num_all_nodes:
            for reason in absent_status.reasons:
                counts[reason] = counts.get(reason, 0) + num_all_nodes - rejected
        histogram = sorted(f"{n} {reason}" for reason, n in counts.items())
        if histogram:
            msg += " " + ", ".join(histogram) + "."
    if post_filter_msg:
        msg += f" {post_filter_msg}"
    return msg
