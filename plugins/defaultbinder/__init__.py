"""Bind plugin DefaultBinder (upstream pkg/scheduler/framework/plugins/defaultbinder)."""

from berth.plugins.defaultbinder.default_binder import DefaultBinder

__all__ = ["DefaultBinder"]
