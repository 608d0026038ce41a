"""The lock file and ``--check``: every kind of growth fails, every shrink passes."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from airlock.cli import app
from airlock.inventory import (
    ApprovalCase,
    EffectLock,
    Selection,
    build_inventory,
    compare_locks,
    load_policy_document,
    lock_from_inventory,
    lock_text,
    read_lock,
    sandbox_effects,
)
from airlock.policies import SandboxProfile
from tests.airlock.inventory_registry import POLICY, POLICY_ARG, REGISTRY_REF, REPO, registry

runner = CliRunner()
ALICE = "principal:alice"
REFUND = "billing_refund_create"
GET = "billing_invoice_get"
Edit = Callable[[dict[str, Any]], None]


@pytest.fixture(autouse=True)
def _no_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/airlock-test-docker.sock")
    monkeypatch.chdir(REPO)


def _lock(profile: SandboxProfile | None = None) -> EffectLock:
    document = load_policy_document(POLICY)
    inventory = build_inventory(
        registry,
        document.select(every_principal=True, roles=["billing_agent"]),
        sandbox=sandbox_effects(profile or SandboxProfile(), image="img", image_digest="x"),
        registry=REGISTRY_REF,
        policy=POLICY_ARG,
    )
    selection = Selection(
        every_principal=True, principals=(), roles=("billing_agent",), tenant=None
    )
    return lock_from_inventory(inventory, selection)


def _edited(edit: Edit) -> EffectLock:
    data = _lock().model_dump(mode="json")
    edit(data)
    return EffectLock.model_validate(data)


def _tool(data: dict[str, Any], tool: str, subject: str = ALICE) -> dict[str, Any]:
    tools: dict[str, Any] = data["subjects"][subject]["tools"]
    return tools[tool]


def _add_tool(data: dict[str, Any]) -> None:
    tools = data["subjects"][ALICE]["tools"]
    tools["billing_invoice_export"] = {**tools[GET], "effects": ["read(billing:export/*)"]}


def _refund_from_code(data: dict[str, Any]) -> None:
    refund = _tool(data, REFUND)
    refund["callers"] = ["code", "direct"]
    refund["reach"] = ["code", "direct", "after_approval"]


def _loosen(data: dict[str, Any]) -> None:
    refund = _tool(data, REFUND)
    refund["approval"] = [refund["approval"][0], refund["approval"][2]]  # drop the ask step


def _cases(*steps: tuple[int, str, str]) -> list[dict[str, Any]]:
    return [
        ApprovalCase(from_amount=a, currency="USD", verdict=v, rule=r).model_dump()  # type: ignore[arg-type]
        for a, v, r in steps
    ]


GROWTH: dict[str, tuple[Edit, str]] = {
    "new tool": (_add_tool, "new_tool"),
    "new subject": (
        lambda d: d["subjects"].__setitem__("principal:carol", d["subjects"][ALICE]),
        "new_subject",
    ),
    "tool becomes reachable": (
        lambda d: _tool(d, "web_page_fetch", "principal:bob").__setitem__(
            "reach", ["code", "direct"]
        ),
        "new_tool",
    ),
    "new effect": (
        lambda d: _tool(d, GET)["effects"].append("read(crm:customer/*)"),
        "new_effect",
    ),
    "wider effect": (
        lambda d: _tool(d, GET).__setitem__(
            "effects", ["network(api.billing.example)", "read(billing:**)"]
        ),
        "new_effect",
    ),
    "new destination": (
        lambda d: _tool(d, GET)["destinations"].append("evil.example"),
        "new_destination",
    ),
    "wildcard destination": (
        lambda d: _tool(d, GET).__setitem__("destinations", ["*.billing.example"]),
        "new_destination",
    ),
    "new credential": (
        lambda d: _tool(d, GET)["credentials"].append("ADMIN_TOKEN"),
        "new_credential",
    ),
    "write callable from code": (_refund_from_code, "write_from_code"),
    "newly reachable after approval": (
        lambda d: _tool(d, "billing_invoice_list").__setitem__(
            "reach", ["code", "direct", "after_approval"]
        ),
        "new_reach",
    ),
    "approval loosened at an amount": (_loosen, "approval_loosened"),
    "approval loosened everywhere": (
        lambda d: _tool(d, REFUND).__setitem__("approval", _cases((0, "allow", "refund-auto"))),
        "approval_loosened",
    ),
    "spend limit raised": (
        lambda d: d["subjects"][ALICE]["grant"]["spend_limits"].__setitem__("USD", 90000),
        "grant_widened",
    ),
    "grant effect widened": (
        lambda d: d["subjects"][ALICE]["grant"]["effects"].append("read(crm:**)"),
        "grant_widened",
    ),
    "grant scope added": (
        lambda d: d["subjects"][ALICE]["grant"]["scopes"].append("crm.read"),
        "grant_widened",
    ),
    "sandbox network opened": (
        lambda d: d["sandbox"].__setitem__("network", "bridge"),
        "sandbox_widened",
    ),
    "sandbox limit raised": (
        lambda d: d["sandbox"]["limits"].__setitem__("memory_bytes", 2**30),
        "sandbox_widened",
    ),
    "sandbox syscall added": (
        lambda d: d["sandbox"]["seccomp_allowed"].append("ptrace"),
        "sandbox_widened",
    ),
    "sandbox full python": (
        lambda d: d["sandbox"].__setitem__("language_mode", "full"),
        "sandbox_widened",
    ),
    "sandbox environment variable": (
        lambda d: d["sandbox"]["environment"].append("AWS_SECRET_ACCESS_KEY"),
        "sandbox_widened",
    ),
}


def _remove_tool(data: dict[str, Any]) -> None:
    del data["subjects"][ALICE]["tools"]["web_page_fetch"]


SHRINK: dict[str, Edit] = {
    "tool removed": _remove_tool,
    "subject removed": lambda d: d["subjects"].pop("principal:bob"),
    "tool denied": lambda d: _tool(d, GET).__setitem__("reach", []),
    "no longer from code": lambda d: _tool(d, GET).__setitem__("reach", ["direct"]),
    "effect removed": lambda d: _tool(d, GET).__setitem__("effects", ["read(billing:invoice/*)"]),
    "narrower effect": lambda d: _tool(d, "billing_invoice_list").__setitem__(
        "effects", ["network(api.billing.example)", "read(billing:invoice/inv_*)"]
    ),
    "destination removed": lambda d: _tool(d, GET).__setitem__("destinations", []),
    "credential removed": lambda d: _tool(d, GET).__setitem__("credentials", []),
    "approval tightened": lambda d: _tool(d, REFUND).__setitem__(
        "approval", _cases((0, "ask", "large-refund"), (50001, "deny", "spend_limit"))
    ),
    "spend limit lowered": lambda d: d["subjects"][ALICE]["grant"]["spend_limits"].__setitem__(
        "USD", 100
    ),
    "grant effect removed": lambda d: d["subjects"][ALICE]["grant"].__setitem__("effects", []),
    "sandbox limit lowered": lambda d: d["sandbox"]["limits"].__setitem__("pids", 16),
    "sandbox import removed": lambda d: d["sandbox"]["allowed_imports"].remove("csv"),
    "idempotency changed": lambda d: _tool(d, REFUND).__setitem__("idempotency", "unknown"),
    "image renamed": lambda d: d["sandbox"].__setitem__("image", "other:1"),
}


@pytest.mark.parametrize("case", sorted(GROWTH))
def test_every_growth_is_detected(case: str) -> None:
    edit, kind = GROWTH[case]
    # The edited lock plays the new state: the old lock is the real one.
    changes = compare_locks(_lock(), _edited(edit))
    growth = [c for c in changes if c.direction == "growth"]
    assert kind in {c.kind for c in growth}, changes


@pytest.mark.parametrize("case", sorted(SHRINK))
def test_every_shrink_is_accepted(case: str) -> None:
    changes = compare_locks(_lock(), _edited(SHRINK[case]))
    assert changes, "the edit should show up as a difference"
    assert not [c for c in changes if c.direction == "growth"], changes


@pytest.mark.parametrize("case", sorted(GROWTH))
def test_the_reverse_of_a_growth_is_not_growth(case: str) -> None:
    edit, _ = GROWTH[case]
    changes = compare_locks(_edited(edit), _lock())
    assert not [c for c in changes if c.direction == "growth"], changes


def test_a_read_becoming_callable_from_code_is_growth() -> None:
    no_code = _edited(SHRINK["no longer from code"])
    changes = compare_locks(no_code, _lock())
    assert [(c.direction, c.tool, c.kind) for c in changes] == [("growth", GET, "new_reach")]


def test_an_unchanged_lock_has_no_difference_and_its_text_is_stable() -> None:
    assert compare_locks(_lock(), _lock()) == []
    assert lock_text(_lock()) == lock_text(_lock())
    assert '"image_digest": "not locked"' in lock_text(_lock())


def test_sandbox_profile_changes_are_judged_by_direction() -> None:
    wider = compare_locks(_lock(), _lock(SandboxProfile(timeout_s=60, tmpfs_bytes=2**26)))
    assert {c.direction for c in wider} == {"growth"}
    narrower = compare_locks(_lock(), _lock(SandboxProfile(timeout_s=1)))
    assert {c.direction for c in narrower} == {"shrink"}


# -- through the command line ------------------------------------------------------------


def _cli(*args: str) -> Any:
    return runner.invoke(
        app, ["inventory", "--registry", REGISTRY_REF, "--policy", args[0], *args[1:]]
    )


def test_lock_then_check_passes_and_a_grown_policy_fails(tmp_path: Path) -> None:
    lock = tmp_path / "effects.lock"
    assert _cli(POLICY_ARG, "--all", "--lock", str(lock)).exit_code == 0
    assert read_lock(lock).selection.every_principal
    unchanged = _cli(POLICY_ARG, "--check", str(lock))
    assert unchanged.exit_code == 0, unchanged.output
    assert "unchanged" in unchanged.output

    grown = tmp_path / "grown.toml"
    text = POLICY.read_text().replace(
        "spend_limits = { USD = 50000 }", "spend_limits = { USD = 90000 }"
    )
    text = text.replace('id = "no-fetch"\naction = "deny"', 'id = "no-fetch"\naction = "allow"')
    grown.write_text(text)
    result = _cli(str(grown), "--check", str(lock))
    assert result.exit_code == 1, result.output
    assert "GROWTH" in result.output
    assert "spend limit USD: 50000 → 90000" in result.output
    assert "principal:bob web_page_fetch: new_tool" in result.output
    assert "grew" in result.output

    shrunk = tmp_path / "shrunk.toml"
    shrunk.write_text(POLICY.read_text().replace('"network(*.cdn.example.net)",\n', ""))
    result = _cli(str(shrunk), "--check", str(lock))
    assert result.exit_code == 0, result.output
    assert "SHRINK" in result.output
    assert "did not grow" in result.output


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (None, "cannot read"),
        ("{not json", "not JSON"),
        ('{"lock_version": 2}', "not an effect lock"),
    ],
)
def test_a_bad_lock_file_is_a_usage_error(tmp_path: Path, content: str | None, reason: str) -> None:
    lock = tmp_path / "effects.lock"
    if content is not None:
        lock.write_text(content)
    result = _cli(POLICY_ARG, "--check", str(lock))
    assert result.exit_code == 2
    assert "error (lock_file)" in result.output
    assert reason in result.output
