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
    ("bidi marks", "to \u200ebob\u200f\u061c ok", "to \\u200ebob\\u200f\\u061c ok"),
    (
        "zero-width joiners, word joiner, invisible times, BOM",
        "to a\u200cl\u200di\u2060c\u2062e\ufeff",
        "to a\\u200cl\\u200di\\u2060c\\u2062e\\ufeff",
    ),
    # Printable to str.isprintable(), yet nothing a reader can see: the rest of Unicode's
    # Default_Ignorable_Code_Point, and blank letters and symbols.
    ("grapheme joiner", "pay Acme\u034f Ltd", "pay Acme\\u034f Ltd"),
    ("Hangul fillers", "to al\u115f\u1160ice\u3164", "to al\\u115f\\u1160ice\\u3164"),
    ("halfwidth Hangul filler", "to bob\uffa0", "to bob\\uffa0"),
    ("Khmer inherent vowels", "to al\u17b4\u17b5ice", "to al\\u17b4\\u17b5ice"),
    ("Mongolian selectors", "to al\u180bi\u180ece\u180f", "to al\\u180bi\\u180ece\\u180f"),
    ("variation selectors", "to al\ufe00ice\ufe0f", "to al\\ufe00ice\\ufe0f"),
    ("variation selector supplement", "ok\U000e0100\U000e01ef", "ok\\U000e0100\\U000e01ef"),
    ("blank braille cell", "to al\u2800ice", "to al\\u2800ice"),
]
IDS = [case for case, _, _ in HOSTILE]
# The rows a renderer that escapes HTML (or JSON) already showed rightly: only characters.
INVISIBLE = [row for row in HOSTILE if row[1] != row[2]]
INVISIBLE_IDS = [case for case, _, _ in INVISIBLE]

# Unicode's Default_Ignorable_Code_Point (DerivedCoreProperties.txt), whole, and blank
# characters of other categories (U+2800): a reader sees nothing of them.
_IGNORABLE = [
    (0x00AD, 0x00AD), (0x034F, 0x034F), (0x061C, 0x061C), (0x115F, 0x1160),
    (0x17B4, 0x17B5), (0x180B, 0x180F), (0x200B, 0x200F), (0x202A, 0x202E),
    (0x2060, 0x206F), (0x3164, 0x3164), (0xFE00, 0xFE0F), (0xFEFF, 0xFEFF),
    (0xFFA0, 0xFFA0), (0xFFF0, 0xFFF8), (0x1BCA0, 0x1BCA3), (0x1D173, 0x1D17A),
    (0xE0000, 0xE0FFF),
]  # fmt: skip
_BLANK = {0x2800}


def hidden(output: str) -> list[str]:
    """The characters of ``output`` a terminal acts on or a reader cannot see, bar newlines."""
    kinds = {"Cc", "Cf", "Cs", "Zl", "Zp"}
    return [
        c
        for c in output
        if c != "\n"
        and (
            unicodedata.category(c) in kinds
            or ord(c) in _BLANK
            or any(low <= ord(c) <= high for low, high in _IGNORABLE)
        )
    ]


# The rows JSON with ensure_ascii=False let through: it escapes only the C0 controls.
BEYOND_C0 = [row for row in INVISIBLE if any(ord(c) >= 0x7F for c in hidden(row[1]))]
BEYOND_C0_IDS = [case for case, _, _ in BEYOND_C0]
