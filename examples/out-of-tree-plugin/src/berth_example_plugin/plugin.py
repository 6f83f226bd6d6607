"""PreferLabel: a Filter and Score plugin written outside Berth's repository.

With args ``labelKey: example.com/pool`` and ``labelValue: general``:

- Filter: a node whose ``example.com/pool`` label holds another value (say
  ``gpu``) is reserved for others: UnschedulableAndUnresolvable, since no
  scheduling decision changes a label. A node without the label passes.
- Score: 100 for a node labelled ``example.com/pool=general``, 0 for any
  other; give the plugin a weight above the default plugins' (5 in
  scheduler-config.yaml) for the preference to win over free capacity.
- Events (upstream's EnqueueExtensions): only a node added or relabelled can
  undo its rejection, and only if the node does not carry another value; the
  scheduler retries a pod it rejected on those events alone.

Each has two forms. The per-node ones (``filter``, ``score``) read the
node's label map, one Python call per candidate node. The batch ones
(``filter_nodes``, ``score_nodes``), which Berth calls in a scheduling
cycle, compare the label over all candidates at once
(``NodeBatch.labels``: a column of the label's values the snapshot keeps
current): a few numpy operations per cycle whatever the number of nodes.
Both give the same answers (tests/test_prefer_label.py checks it).

Berth finds the class through the entry point in pyproject.toml
(``PreferLabel = "berth_example_plugin.plugin:PreferLabel"``): the entry
point's name is the class's ``name``.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from berth.framework import (
    MAX_NODE_SCORE,
    MIN_NODE_SCORE,
    ActionType,
    ClusterEvent,
    ClusterEventWithHint,
    CycleState,
    EventResource,
    FilterPlugin,
    Handle,
    NodeBatch,
    NodeInfo,
    NodeVerdicts,
    PodInfo,
    QueueingHint,
    ScoreArray,
    ScorePlugin,
    Status,
)
from berth_example_plugin.args import PreferLabelArgs

__all__ = ["NAME", "PreferLabel"]

NAME = "PreferLabel"


class PreferLabel(FilterPlugin[PreferLabelArgs], ScorePlugin[PreferLabelArgs]):
    name: ClassVar[str] = NAME
    # What Berth decodes the pluginConfig args into; the interfaces' type
    # parameter makes ``self.args`` a PreferLabelArgs for mypy.
    Args = PreferLabelArgs

    def __init__(self, args: PreferLabelArgs | None = None, handle: Handle | None = None) -> None:
        super().__init__(args, handle)
        # Berth decodes and validates the args before building the plugin;
        # PreferLabel has no usable defaults, so args are required.
        if not isinstance(args, PreferLabelArgs):
            raise TypeError(f"{NAME} needs PreferLabelArgs (labelKey, labelValue), got {args!r}")
        self.key = self.args.label_key
        self.value = self.args.label_value
        # One Status for every rejected node: the scheduler's FitError
        # message counts nodes per reason ("2 node(s) had ...").
        self._rejected = Status.unresolvable(
            f"node(s) had label {self.key} with a value other than {self.value!r}"
        )

    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        if self._reserved_for_others(node):
            return self._rejected
        return Status.success()

    def filter_nodes(self, state: CycleState, pod: PodInfo, nodes: NodeBatch) -> NodeVerdicts:
        """``filter`` over every candidate at once: rejected where the label
        is present with another value."""
        labels = nodes.labels(self.key)
        return NodeVerdicts.from_mask(labels.present & ~labels.equals(self.value), self._rejected)

    def _reserved_for_others(self, node: NodeInfo) -> bool:
        have = node.node.labels.get(self.key)
        return have is not None and have != self.value

    def events_to_register(self) -> list[ClusterEventWithHint]:
        """A pod this plugin rejected may fit a node added or relabelled; the
        hint keeps a node still reserved for others from retrying it."""
        return [
            ClusterEventWithHint(
                ClusterEvent(EventResource.NODE, ActionType.ADD | ActionType.UPDATE_NODE_LABEL),
                self.is_schedulable_after_node_change,
            )
        ]

    def is_schedulable_after_node_change(
        self, pod: PodInfo, old: NodeInfo | None, new: Any
    ) -> QueueingHint:
        if self._reserved_for_others(new):
            return QueueingHint.QUEUE_SKIP
        return QueueingHint.QUEUE

    def score(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> int:
        if node.node.labels.get(self.key) == self.value:
            return MAX_NODE_SCORE
        return MIN_NODE_SCORE

    def score_nodes(self, state: CycleState, pod: PodInfo, nodes: NodeBatch) -> ScoreArray:
        """``score`` over every candidate at once."""
        preferred = nodes.labels(self.key).equals(self.value)
        # MIN_NODE_SCORE is 0: the preferred nodes' mask times the maximum.
        scores: ScoreArray = np.multiply(preferred, MAX_NODE_SCORE, dtype=np.int64)
        return scores
