"""Node labels as columns: one label key's values over a snapshot's node
slots, for Filter and Score plugins that read node labels in their batch form.

A plugin asks its candidates for a key (``NodeBatch.labels(key)``) and gets
a ``NodeLabels``, the values of that key aligned with the batch as small
integer codes, and compares them with numpy::

    labels = nodes.labels("example.com/pool")
    rejected = labels.present & ~labels.equals("general")

The snapshot keeps one ``LabelColumn`` per key a plugin has asked for. The
first request builds it from the node records (O(nodes), once per key and
snapshot); from then on the snapshot updates it in O(1) per node added,
relabelled or removed, so a cycle pays only numpy work over its candidates,
never a Python call per node.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import numpy as np
import numpy.typing as npt

__all__ = ["ABSENT", "LabelColumn", "NodeLabels"]

CodeArray = npt.NDArray[np.int32]
BoolArray = npt.NDArray[np.bool_]

# The code of a slot whose node has no label of the key (or no node).
ABSENT = -1
# What ``LabelColumn.code`` answers for a value no node holds: it equals no
# slot's code, ABSENT included.
_NOWHERE = -2


class LabelColumn:
    """One label key over the node slots of a snapshot: ``codes[slot]`` is
    ``ABSENT`` or the index in ``values`` of the node's value. Codes of
    values no node holds any more are dropped when they outnumber the live
    ones (``compact``), so relabelling churn holds memory bounded by the
    nodes, not by the history."""

    __slots__ = ("_code_of", "codes", "key", "live", "values")

    def __init__(self, key: str, capacity: int) -> None:
        self.key = key
        self.codes: CodeArray = np.full(capacity, ABSENT, dtype=np.int32)
        self.values: list[str] = []
        self._code_of: dict[str, int] = {}
        # Slots holding a value (code >= 0), for ``needs_compaction``.
        self.live = 0

    def code(self, value: str) -> int:
        """The code of ``value``; one no slot has when no node holds it."""
        return self._code_of.get(value, _NOWHERE)

    def codes_of(self, values: Iterable[str]) -> list[int]:
        """The codes of those of ``values`` some node holds (one dict lookup
        each, no Python call per value)."""
        return [c for c in map(self._code_of.get, values) if c is not None]

    def set(self, slot: int, labels: Mapping[str, str] | None, capacity: int) -> None:
        """The node in ``slot`` now has ``labels`` (None: the slot is empty);
        ``capacity`` is the snapshot's column size, which the codes follow."""
        if len(self.codes) < capacity:
            grown = np.full(capacity, ABSENT, dtype=np.int32)
            grown[: len(self.codes)] = self.codes
            self.codes = grown
        value = None if labels is None else labels.get(self.key)
        old = int(self.codes[slot])
        if value is None:
            new = ABSENT
        else:
            new = self._code_of.get(value, -1)
            if new < 0:
                new = self._code_of[value] = len(self.values)
                self.values.append(value)
        self.codes[slot] = new
        self.live += (new >= 0) - (old >= 0)

    def needs_compaction(self) -> bool:
        """More codes than twice the slots holding a value (plus slack)."""
        return len(self.values) > 2 * self.live + 16

    def compact(self, slots: Iterable[tuple[int, Mapping[str, str]]], capacity: int) -> None:
        """Rebuilds the codes from ``slots`` ((slot, labels) of every node),
        keeping only values some node holds."""
        self.codes = np.full(capacity, ABSENT, dtype=np.int32)
        self.values = []
        self._code_of = {}
        self.live = 0
        for slot, labels in slots:
            self.set(slot, labels, capacity)


class NodeLabels:
    """The values of one label key over a batch of candidate nodes, aligned
    with it: ``codes[k]`` is candidate k's code (``ABSENT`` without the
    label). Each method is one numpy operation over the batch."""

    __slots__ = ("codes", "column")

    def __init__(self, column: LabelColumn, codes: CodeArray) -> None:
        self.column = column
        self.codes = codes

    @property
    def present(self) -> BoolArray:
        """Candidates that have the label (any value, "" included)."""
        out: BoolArray = self.codes >= 0
        return out

    def equals(self, value: str) -> BoolArray:
        """Candidates whose label holds ``value`` (label selectors' ``=``/``In``
        with one value)."""
        out: BoolArray = self.codes == self.column.code(value)
        return out

    def isin(self, values: Iterable[str]) -> BoolArray:
        """Candidates whose label holds one of ``values`` (``In``); negate it
        for ``NotIn`` (true also where the label is absent)."""
        # A lookup table over the column's codes (no sort, as np.isin would
        # do); its extra last entry, False, is what ABSENT (-1) reads.
        table = np.zeros(len(self.column.values) + 1, dtype=np.bool_)
        codes = self.column.codes_of(values)
        if codes:
            table[codes] = True
        out: BoolArray = table[self.codes]
        return out

    def value(self, k: int) -> str | None:
        """Candidate k's value, None without the label."""
        code = int(self.codes[k])
        return None if code < 0 else self.column.values[code]
