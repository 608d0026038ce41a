"""Text the model writes (a summary, a tool name, a message) with what a person must see of
it in a one-line field: never read as markup, and every character a terminal acts on or a
reader cannot see written as an escape. The tests of each command that prints such text run
over this table."""

from __future__ import annotations

import unicodedata

HOSTILE: list[tuple[str, str, str]] = [
    # (case, what the model wrote, what a one-line field shows)
    (
        "markup hides text",
        "pay [white on white]wire 9 USD[/] ok",
        "pay [white on white]wire 9 USD[/] ok",
    ),
    ("a lone closing tag", "close [/] here", "close [/] here"),
    ("an emoji code", "ok :warning: go", "ok :warning: go"),
    ("ESC clears, colours", "\x1b[2J\x1b[31mRED", "\\x1b[2J\\x1b[31mRED"),
    ("OSC window title", "\x1b]0;pwned\x07 done", "\\x1b]0;pwned\\x07 done"),
    ("C1 CSI erases", "ok\x9b2K gone", "ok\\x9b2K gone"),
    ("a newline forges a field", "ok\nfingerprint  00", "ok\\nfingerprint  00"),
    ("bidi override", "pay \u202e0001$\u202c now", "pay \\u202e0001$\\u202c now"),
    ("bidi isolate", "to \u2067bob\u2069 ok", "to \\u2067bob\\u2069 ok"),
    ("zero-width space", "to al\u200bice", "to al\\u200bice"),
    ("soft hyphen", "to al\u00adice", "to al\\xadice"),
    ("invisible tag letters", "ok\U000e0041\U000e0042", "ok\\U000e0041\\U000e0042"),
    ("line separator", "ok\u2028fingerprint", "ok\\u2028fingerprint"),
]
IDS = [case for case, _, _ in HOSTILE]
# The rows a renderer that escapes HTML (or JSON) already showed rightly: only characters.
INVISIBLE = [row for row in HOSTILE if row[1] != row[2]]
INVISIBLE_IDS = [case for case, _, _ in INVISIBLE]
# The rows JSON with ensure_ascii=False let through: it escapes only the C0 controls.
BEYOND_C0 = [row for row in INVISIBLE if any(ord(c) >= 0x7F for c in row[1] if not c.isprintable())]
BEYOND_C0_IDS = [case for case, _, _ in BEYOND_C0]


def hidden(output: str) -> list[str]:
    """The characters of ``output`` a terminal acts on or a reader cannot see, bar newlines."""
    kinds = {"Cc", "Cf", "Cs", "Zl", "Zp"}
    return [c for c in output if c != "\n" and unicodedata.category(c) in kinds]
