"""A destination's host takes one trailing dot at most, as a resolved ``network`` target's
does: ``metadata.google.internal..`` names no destination (the policy refuses it; the
egress check must not read it as ``metadata.google.internal``)."""

from __future__ import annotations

import pytest

from airlock.tools._destination import destination_of, parse_destination

# (target, the host it names, or None when it names no destination)
HOSTS = [
    ("metadata.google.internal", "metadata.google.internal"),
    ("metadata.google.internal.", "metadata.google.internal"),
    ("https://metadata.google.internal./x", "metadata.google.internal"),
    ("metadata.google.internal..", None),
    ("https://metadata.google.internal../x", None),
    ("https://metadata.google.internal...:443/x", None),
    ("https://a..b/x", None),
]


@pytest.mark.parametrize(("target", "host"), HOSTS)
def test_a_host_takes_one_trailing_dot_at_most(target: str, host: str | None) -> None:
    found = destination_of(target)
    assert (found.host if found is not None else None) == host
    if host is None:
        with pytest.raises(ValueError, match="not a host name"):
            parse_destination(target)
