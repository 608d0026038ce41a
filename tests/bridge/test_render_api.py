from __future__ import annotations

import os
from pathlib import Path

from airlock.bridge import render_api, tool_stubs
from airlock.bridge.airlock_wire import ERRORS
from airlock.policies import Principal
from tests.bridge.records import ALICE, build_registry

SNAPSHOT = Path(__file__).parent / "snapshots" / "records_api.py.txt"


def test_render_api_matches_snapshot() -> None:
    text = render_api(build_registry(), ALICE)
    if os.environ.get("UPDATE_SNAPSHOTS") == "1":  # then review the diff like code
        SNAPSHOT.parent.mkdir(exist_ok=True)
        SNAPSHOT.write_text(text)
    assert text == SNAPSHOT.read_text()


def test_rendered_api_is_valid_python_without_writes_or_hidden_tools() -> None:
    text = render_api(build_registry(), ALICE)
    compile(text, "api", "exec")
    assert "def records_item_get(record_id: str) -> dict:" in text
    assert "records_item_delete" not in text
    assert "records_secret_get" not in text


def test_stubs_follow_the_principal() -> None:
    admin = Principal(
        user_id="root", tenant_id="acme", scopes=frozenset({"records.read", "records.admin"})
    )
    names = {stub.name for stub in tool_stubs(build_registry(), admin)}
    assert "records_secret_get" in names
    assert "records_item_delete" not in names
    nobody = Principal(user_id="eve", tenant_id="acme", scopes=frozenset())
    assert tool_stubs(build_registry(), nobody) == []
    assert "No tools are callable" in render_api(build_registry(), nobody)


def test_rendered_api_names_every_error_class_with_its_attributes() -> None:
    text = " ".join(render_api(build_registry(), ALICE).split())
    for shape in ERRORS.values():
        fields = ", ".join(f"`.{name}`" for name in shape.fields)
        assert f"`tools.{shape.name}`" + (f" ({fields}" if fields else "") in text, shape
    assert "`.retry_after`: seconds to wait, or None" in text
