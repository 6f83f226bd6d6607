"""Bind plugin DefaultBinder (upstream pkg/scheduler/framework/plugins/defaultbinder)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from berth.framework.lazy import lazy_exports

if TYPE_CHECKING:
    from berth.plugins.defaultbinder.default_binder import DefaultBinder

__all__ = ["DefaultBinder"]

if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy_exports(globals())
