"""``approvals approve ID --commit`` of what only the session that asked can run (an approved
read: it may hold a Secret() value only that session has): approved, nothing run, and the
command says so and exits 1, rather than looking as if it had committed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest
from typer.testing import CliRunner

from airlock.cli import approvals_app
from airlock.tools import Preview, Registry
from tests.airlock.cli.commit_policy import policy_file
from tests.tools.test_reach_forms import Fetched, World, ctx, web_registry


def registry() -> Registry:
    return web_registry(Fetched())


@pytest.mark.parametrize("extra", [{}, {"token": "tok_1"}], ids=["plain", "with_a_secret"])
def test_approve_commit_of_an_approved_read_says_nothing_ran(
    tmp_path: Path, extra: dict[str, Any]
) -> None:
    world = World(tmp_path)
    asked = anyio.run(
        lambda: world.writes.call(
            "web_page_fetch", {"url": "https://evil.example/p", **extra}, ctx()
        )
    )
    assert isinstance(asked, Preview)
    done = CliRunner().invoke(
        approvals_app,
        [
            "approve", asked.id, "--ledger", str(world.ledger.path),
            "--fingerprint", asked.fingerprint, "--as", "bob", "--commit",
            "--registry", f"{__name__}:registry", "--policy", policy_file(tmp_path),
        ],
        env={"COLUMNS": "250"},
    )  # fmt: skip
    assert done.exit_code == 1, done.output
    assert "not committed here" in done.output
    stored = world.ledger.preview(asked.id)
    assert stored is not None
    assert stored.state == "approved"  # the approval stands; nothing ran
    assert world.fetched.urls == []
