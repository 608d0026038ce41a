"""A feature whose optional dependency is missing says, in one line, which extra to install."""

from __future__ import annotations

import sys

import pytest
from typer.testing import CliRunner

from airlock import MissingExtraError, requires_extra
from airlock.cli import app


def test_a_missing_module_names_the_extra() -> None:
    with (
        pytest.raises(MissingExtraError) as missing,
        requires_extra("demo", feature="the billing example"),
    ):
        import airlock_no_such_module  # type: ignore[import-not-found]  # noqa: F401

    assert (missing.value.code, missing.value.extra) == ("missing_extra", "demo")
    assert missing.value.module == "airlock_no_such_module"
    assert str(missing.value).endswith("pip install 'airlock[demo]'")


def test_other_import_errors_are_not_taken_for_a_missing_extra() -> None:
    with pytest.raises(ImportError) as broken, requires_extra("mcp", feature="x"):
        raise ImportError("cannot import name 'x' from 'mcp'")
    assert not isinstance(broken.value, MissingExtraError)


def test_serve_without_the_mcp_extra_says_so_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    # As if the SDK were not installed: importing it fails, and the front end loads anew.
    for name in [m for m in sys.modules if m == "mcp" or m.startswith(("mcp.", "mcp_types"))]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "mcp_types", None)
    monkeypatch.setitem(sys.modules, "mcp", None)
    monkeypatch.delitem(sys.modules, "airlock.frontends.mcp", raising=False)

    args = ["serve", "--mcp", "--registry", "x:y", "--policy", "p.toml", "--user", "a"]
    result = CliRunner().invoke(app, args)

    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1, result.output
    assert lines[0].startswith("error (missing_extra):")
    assert "pip install 'airlock[mcp]'" in lines[0]
