"""The host's artifact receiver once its run was ended: a piece whose worker thread outlived
the run (it was cancelled while the piece was on its way) is refused and makes nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from airlock.bridge import ArtifactRefused
from airlock.sandbox._artifacts import ArtifactReceiver

LATE = [
    ("same_file", "tables/a.csv", 4),
    ("new_file", "b.csv", 0),
    ("new_folder", "charts/c.png", 0),
]


@pytest.mark.parametrize(("case", "name", "offset"), LATE, ids=[c[0] for c in LATE])
def test_a_piece_after_discard_is_refused_and_makes_nothing(
    tmp_path: Path, case: str, name: str, offset: int
) -> None:
    receiver = ArtifactReceiver(tmp_path / "run", max_files=4, max_bytes=100)
    receiver.receive("tables/a.csv", 0, b"1234", end=False)
    receiver.discard()
    with pytest.raises(ArtifactRefused) as refused:
        receiver.receive(name, offset, b"5", end=True)
    assert (refused.value.limit, refused.value.message) == (
        False,
        f"artifact {name!r}: the run was ended",
    )
    assert list(tmp_path.iterdir()) == []
    receiver.discard()  # twice is fine
