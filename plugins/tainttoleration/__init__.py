"""Filter/PreScore/Score plugin TaintToleration (upstream
pkg/scheduler/framework/plugins/tainttoleration)."""

from berth.plugins.tainttoleration.taint_toleration import (
    ERR_REASON_UNTOLERATED,
    PRE_SCORE_STATE_KEY,
    TaintToleration,
)

__all__ = ["ERR_REASON_UNTOLERATED", "PRE_SCORE_STATE_KEY", "TaintToleration"]
