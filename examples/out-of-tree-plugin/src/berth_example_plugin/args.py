"""PreferLabelArgs: the ``pluginConfig`` args of PreferLabel.

Both fields are required (a profile that enables PreferLabel without a
pluginConfig entry is refused at start) and checked by ``validate()`` the way
Kubernetes checks label keys and values (apimachinery's
validation.IsQualifiedName and IsValidLabelValue). Berth's config loader calls
``validate()`` and reports each ``<field>: <reason>`` under the entry's path,
e.g. ``profiles[0].pluginConfig[0].args.labelKey: ...``.
"""

from __future__ import annotations

import re

import msgspec

__all__ = ["PreferLabelArgs", "label_key_errors", "label_value_errors"]

_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_NAME_RULE = (
    "must consist of alphanumeric characters, '-', '_' or '.', and must start and end "
    "with an alphanumeric character"
)


def label_key_errors(key: str) -> list[str]:
    """Why ``key`` is not a valid label key (``[prefix/]name``); empty if it is."""
    if not key:
        return ["required value"]
    prefix, slash, name = key.rpartition("/")
    errors: list[str] = []
    if slash and not prefix:
        errors.append("prefix part must be non-empty")
    elif prefix:
        if len(prefix) > 253:
            errors.append("prefix part must be no more than 253 characters")
        if not _DNS_SUBDOMAIN.match(prefix):
            errors.append(
                "prefix part must be a lowercase DNS subdomain (e.g. 'example.com'): "
                "alphanumeric characters, '-' or '.', starting and ending with an "
                "alphanumeric character"
            )
    if not name:
        errors.append("name part must be non-empty")
    else:
        if len(name) > 63:
            errors.append("name part must be no more than 63 characters")
        if not _NAME.match(name):
            errors.append(f"name part {_NAME_RULE}")
    return errors


def label_value_errors(value: str) -> list[str]:
    """Why ``value`` is not a valid label value; empty if it is (the empty
    value is valid, as in Kubernetes)."""
    errors: list[str] = []
    if len(value) > 63:
        errors.append("must be no more than 63 characters")
    if value and not _NAME.match(value):
        errors.append(_NAME_RULE)
    return errors


class PreferLabelArgs(msgspec.Struct, rename="camel", forbid_unknown_fields=True):
    """Nodes labelled ``labelKey=labelValue`` are preferred; nodes whose
    ``labelKey`` label holds another value are filtered out."""

    label_key: str
    label_value: str

    def validate(self) -> None:
        """Raises ValueError naming every bad field as ``<field>: <reason>``,
        joined with "; " (the form Berth's config loader splits)."""
        problems = [
            f"labelKey: Invalid value: {self.label_key!r}: {reason}"
            if self.label_key
            else f"labelKey: {reason}"
            for reason in label_key_errors(self.label_key)
        ]
        problems += [
            f"labelValue: Invalid value: {self.label_value!r}: {reason}"
            for reason in label_value_errors(self.label_value)
        ]
        if problems:
            raise ValueError("; ".join(problems))
