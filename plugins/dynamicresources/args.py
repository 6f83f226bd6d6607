"""DynamicResourcesArgs: the ``pluginConfig`` args of DynamicResources.

Field names are upstream's (staging/src/k8s.io/kube-scheduler/config/v1/
types_pluginargs.go, DynamicResourcesArgs): both are ``metav1.Duration``
strings (``10s``, ``1m30s``). Defaults are SetDefaults_DynamicResourcesArgs
(pkg/scheduler/apis/config/v1/defaults.go) with v1.36's feature gates:
DRASchedulerFilterTimeout (beta, on) gives ``filterTimeout`` 10s, and
DRADeviceBindingConditions with DRAResourceClaimDeviceStatus (beta, on) give
``bindingTimeout`` 600s (types_pluginargs.go, DynamicResourcesFilterTimeoutDefault,
DynamicResourcesBindingTimeoutDefault). ``validate()`` is
ValidateDynamicResourcesArgs (validation/validation_pluginargs.go) with those
gates on.
"""

from __future__ import annotations

from typing import Final

import msgspec

from berth.framework.config import parse_go_duration

__all__ = [
    "DEFAULT_BINDING_TIMEOUT",
    "DEFAULT_FILTER_TIMEOUT",
    "DynamicResourcesArgs",
]

DEFAULT_FILTER_TIMEOUT: Final = "10s"
DEFAULT_BINDING_TIMEOUT: Final = "600s"
# The longest duration text read: a Go duration is short; anything longer is
# refused before it is parsed.
_MAX_DURATION_TEXT: Final = 64


class DynamicResourcesArgs(msgspec.Struct, rename="camel", forbid_unknown_fields=True):
    """Args of DynamicResources (both optional)."""

    # How long Filter may spend allocating devices on one node; 0 turns the
    # limit off. (Berth's allocator is not interrupted mid-node: see the
    # plugin's README.)
    filter_timeout: str = DEFAULT_FILTER_TIMEOUT
    # How long PreBind waits for devices' binding conditions, and how long
    # after allocation Filter still accepts a claim whose conditions are not
    # met (isClaimTimeout).
    binding_timeout: str = DEFAULT_BINDING_TIMEOUT

    def validate(self) -> None:
        """ValidateDynamicResourcesArgs: raises ValueError as ``<field>:
        <reason>`` (several joined by "; ")."""
        errors: list[str] = []
        filter_seconds = _seconds(self.filter_timeout, "filterTimeout", errors)
        if filter_seconds is not None and filter_seconds < 0:
            errors.append(
                f"filterTimeout: Invalid value: {self.filter_timeout!r}: must be zero or positive"
            )
        binding_seconds = _seconds(self.binding_timeout, "bindingTimeout", errors)
        if binding_seconds is not None and binding_seconds < 1:
            errors.append(
                f"bindingTimeout: Invalid value: {self.binding_timeout!r}: must be at least 1 second"
            )
        if errors:
            raise ValueError("; ".join(errors))

    @property
    def filter_timeout_seconds(self) -> float:
        return parse_go_duration(self.filter_timeout)

    @property
    def binding_timeout_seconds(self) -> float:
        return parse_go_duration(self.binding_timeout)


def _seconds(text: str, field: str, errors: list[str]) -> float | None:
    if len(text) > _MAX_DURATION_TEXT:
        errors.append(f"{field}: Invalid value: a duration of {len(text)} characters")
        return None
    try:
        return parse_go_duration(text)
    except ValueError as exc:
        errors.append(f"{field}: Invalid value: {exc}")
        return None
