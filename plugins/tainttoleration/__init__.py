"""Filter/PreScore/Score plugin TaintToleration (upstream
pkg/scheduler/framework/plugins/tainttoleration)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from berth.framework.lazy import lazy_exports

if TYPE_CHECKING:
    from berth.plugins.tainttoleration.taint_toleration import (
        ERR_REASON_UNTOLERATED,
        PRE_SCORE_STATE_KEY,
        TaintToleration,
    )

__all__ = ["ERR_REASON_UNTOLERATED", "PRE_SCORE_STATE_KEY", "TaintToleration"]

if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy_exports(globals())
