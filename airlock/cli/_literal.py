"""Text from the ledger, the audit log or the model, shown to a person as it is.

The model writes tool names, arguments, summaries and error text, and the CLI prints them
through rich, which reads ``[...]`` as markup (a stray ``[/]`` raises, ``[white on white]``
hides what follows) and hands control characters to the terminal (``ESC [2J`` clears the
screen). A bidi override or a zero-width space makes ``pay $1000`` or ``to alice`` out of
other text. So every such piece of text goes through this module: it is never parsed as
markup, and each character a terminal acts on or a reader cannot see is shown as an escape::

    C0, DEL and C1 controls (Cc)                            \\x1b  \\x07  \\n  \\x9b
    format characters (Cf): bidi, zero-width, soft hyphen   \\u202e  \\u200b  \\xad
    line and paragraph separators, lone surrogates          \\u2028  \\udc80
    any other character that is not printable (odd spaces)  \\xa0  \\u3000
    printable but unseen: default-ignorable, blank          \\u034f  \\u3164  \\ufe0f  \\u2800

Backslashes are left as they are, so ``\\u202e`` typed by the model reads the same as the
character: both are visible, and neither reorders the text.
"""

from __future__ import annotations

import json

from rich.highlighter import JSONHighlighter
from rich.table import Table
from rich.text import Text

from airlock.tools import escape_controls

__all__ = ["json_text", "literal", "table", "visible", "visible_json"]

# What a block of several lines needs for its layout; in a one-line cell a newline could
# forge the next line (a "fingerprint" of the model's choosing), so it is escaped there.
_LAYOUT = frozenset("\n\t")
_NEWLINE = frozenset("\n")


def visible(text: str, *, lines: bool = False) -> str:
    """``text`` with every character that is not printable (controls, format characters,
    separators, lone surrogates) or not seen (default-ignorable, blank) written as its
    escape (``\\x1b``, ``\\u202e``, ``\\u034f``), as the audit log writes them
    (:func:`airlock.tools.escape_controls`); ``lines=True`` keeps newlines and tabs, for a
    block of several lines (a program, a message)."""
    return escape_controls(text, keep=_LAYOUT if lines else frozenset())


def literal(text: str, style: str = "", *, lines: bool = False) -> Text:
    """``text`` as rich text that is printed as it is: :func:`visible`, never markup or
    emoji codes."""
    return Text(visible(text, lines=lines), style=style)


def _json_escape(char: str) -> str:
    code = ord(char)
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    high, low = divmod(code - 0x10000, 0x400)  # JSON spells astral characters as a pair
    return f"\\u{0xD800 + high:04x}\\u{0xDC00 + low:04x}"


def visible_json(value: object, *, indent: int | None = 2) -> str:
    """``json.dumps(value, ensure_ascii=False)`` with every hidden character as a JSON
    ``\\u`` escape: the same data once parsed, and nothing a terminal acts on."""
    dumped = json.dumps(value, indent=indent, ensure_ascii=False)
    # json.dumps escapes C0 inside strings, so a raw newline here is the indentation's.
    # Which characters hide is escape_controls' rule (it knows more than str.isprintable).
    if escape_controls(dumped, keep=_NEWLINE) == dumped:
        return dumped
    return "".join(c if escape_controls(c, keep=_NEWLINE) == c else _json_escape(c) for c in dumped)


def json_text(value: object) -> Text:
    """``value`` as ``Console.print_json`` shows it (indented, highlighted, not wrapped),
    with :func:`visible_json`'s escapes; print it with ``soft_wrap=True``."""
    text = JSONHighlighter()(visible_json(value))
    text.no_wrap = True
    return text


def table(*columns: str, title: str | Text | None = None) -> Table:
    """A table whose cells fold a long value onto more lines, never cut it short with an
    ellipsis (rich's default): the tail of an address or an id is where a look-alike
    differs, so a person must see all of it."""
    folding = Table(title=title)
    for column in columns:
        folding.add_column(column, overflow="fold")
    return folding
