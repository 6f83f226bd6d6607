"""Go's %q formatting of strings, for messages that must read as upstream's do
(kube-scheduler builds many of its status reasons with fmt's %q)."""

from __future__ import annotations

__all__ = ["go_quote"]

_GO_ESCAPES = {
    "\a": "\\a",
    "\b": "\\b",
    "\f": "\\f",
    "\n": "\\n",
    "\r": "\\r",
    "\t": "\\t",
    "\v": "\\v",
    "\\": "\\\\",
    '"': '\\"',
}


def go_quote(s: str) -> str:
    """``s`` as Go's %q prints a string (strconv.Quote): double quotes,
    backslash escapes, non-printable runes as \\x, \\u or \\U escapes."""
    out = ['"']
    for ch in s:
        esc = _GO_ESCAPES.get(ch)
        if esc is not None:
            out.append(esc)
        elif ch.isprintable():
            out.append(ch)
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\x{ord(ch):02x}")
        elif ord(ch) < 0x10000:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(f"\\U{ord(ch):08x}")
    out.append('"')
    return "".join(out)
