"""The inventory of the demo registry (the billing tools) under the demo policy: golden
outputs and lock, the refund never reachable from code, the service as each tool's network
destination, each principal's tenant credential named while no value appears anywhere.

Regenerate the golden files after an intended change, then review the diff::

    AIRLOCK_UPDATE_GOLDEN=1 .venv/bin/pytest tests/examples/billing/test_demo_inventory.py
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from airlock.cli import app
from airlock.inventory import Inventory, load_policy_document, load_registry
from examples.billing import DEMO_BASE_URL, DEMO_POLICY, TENANTS
from tests.airlock.inventory_registry import REPO

GOLDEN = Path(__file__).with_name("golden")
UPDATE = os.environ.get("AIRLOCK_UPDATE_GOLDEN") == "1"
REGISTRY_REF = "examples.billing:demo_registry"
POLICY_ARG = "examples/billing/demo_policy.toml"
"""The policy as the golden files name it: relative to the repository root."""
BASE = ["inventory", "--registry", REGISTRY_REF, "--policy", POLICY_ARG]
NAMES = tuple(sorted(f"BILLING_TOKEN_{tenant.upper()}" for tenant in TENANTS))
REFUND = "billing_refund_create"
runner = CliRunner()


@pytest.fixture(autouse=True)
def _no_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    # The image digest depends on the machine; with no engine it is always "unknown".
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/airlock-test-docker.sock")
    monkeypatch.setenv("AIRLOCK_HOME", "/var/lib/airlock")
    monkeypatch.delenv("AIRLOCK_IMAGE", raising=False)
    for name in NAMES:
        monkeypatch.delenv(name, raising=False)
    # What moves airlock's own connections (a proxy, libpq's variables, a database, spans)
    # belongs to the machine, not to the golden.
    for name in [
        n for n in os.environ
        if n.lower().endswith("_proxy") or n.startswith(("PG", "OTEL_", "AIRLOCK_DATABASE"))
    ]:  # fmt: skip
        monkeypatch.delenv(name)
    monkeypatch.chdir(REPO)


def _matches_golden(name: str, text: str) -> None:
    golden = GOLDEN / name
    if UPDATE:
        golden.parent.mkdir(exist_ok=True)
        golden.write_text(text)
    assert text == golden.read_text(), (
        f"{golden.relative_to(REPO)} is out of date; rerun with AIRLOCK_UPDATE_GOLDEN=1 "
        "and review the diff"
    )


def _inventory() -> Inventory:
    result = runner.invoke(app, [*BASE, "--all", "--format", "json"])
    assert result.exit_code == 0, result.output
    return Inventory.model_validate_json(result.output)


# -- golden outputs ------------------------------------------------------------------------


def test_the_demo_policy_is_the_packaged_file() -> None:
    assert (REPO / POLICY_ARG).resolve() == DEMO_POLICY.resolve()
    assert DEMO_POLICY.is_file()


@pytest.mark.parametrize(
    ("fmt", "name"),
    [("table", "inventory.txt"), ("json", "inventory.json"), ("markdown", "inventory.md")],
)
def test_golden_output(fmt: str, name: str) -> None:
    result = runner.invoke(app, [*BASE, "--all", "--format", fmt])
    assert result.exit_code == 0, result.output
    _matches_golden(name, result.output)


def test_golden_lock_and_the_check_against_it_passes(tmp_path: Path) -> None:
    lock = tmp_path / "effects.lock"
    result = runner.invoke(app, [*BASE, "--all", "--lock", str(lock)])
    assert result.exit_code == 0, result.output
    _matches_golden("effects.lock", lock.read_text())
    check = runner.invoke(app, [*BASE, "--check", str(GOLDEN / "effects.lock")])
    assert (check.exit_code, check.output) == (0, "the reachable set is unchanged\n")


# -- what the inventory says -----------------------------------------------------------------


def test_the_refund_is_never_reachable_from_code() -> None:
    inventory = _inventory()
    assert [s.name for s in inventory.subjects] == ["*", "alice"]
    for subject in inventory.subjects:
        assert REFUND not in subject.composed.from_code.tools
        assert not [e for e in subject.composed.from_code.effects if e.startswith("write(")]
        for tool in subject.tools:
            if tool.name == REFUND:
                assert "code" not in tool.callers
                assert "code" not in tool.reach
    alice = next(s for s in inventory.subjects if s.name == "alice")
    assert alice.composed.after_approval.tools == (REFUND,)
    assert alice.composed.from_code.tools == ("billing_invoice_get", "billing_invoice_list")
    catalog = load_registry(REGISTRY_REF)
    principal = load_policy_document(DEMO_POLICY).principal("alice").principal
    assert REFUND in {d.name for d in catalog.visible(principal, "direct")}
    assert REFUND not in {d.name for d in catalog.visible(principal, "code")}


def test_the_billing_service_is_each_tools_network_destination() -> None:
    destination = "http://127.0.0.1:8400"
    assert destination == DEMO_BASE_URL
    for subject in _inventory().subjects:
        assert {t.destinations for t in subject.tools} == {(destination,)}
        # A read through the adapter reaches the network: never listed as a closed read.
        assert all(t.network for t in subject.tools)
        assert f"network({destination})" in subject.composed.from_code.effects
        network = next(t for t in subject.composed.totals if t.kind == "network")
        assert network.patterns == (f"network({destination})",)


def test_each_principal_lists_the_credential_of_its_tenant() -> None:
    subjects = {s.name: s for s in _inventory().subjects}
    alice = subjects["alice"]  # tenant acme
    assert {(t.credentials, t.credential_tenant) for t in alice.tools} == {
        (("BILLING_TOKEN_ACME",), "acme")
    }
    # Anyone else: [principals."*"] binds no tenant, so it acts in any, with that tenant's token.
    anyone = subjects["*"]
    assert {(t.credentials, t.credential_tenant) for t in anyone.tools} == {(NAMES, None)}
    catalog = load_registry(REGISTRY_REF)
    assert {dict(spec.tenant_credentials)["globex"] for spec in catalog.specs()} == {
        "BILLING_TOKEN_GLOBEX"
    }


def test_a_principal_moved_to_another_tenant_fails_the_check(tmp_path: Path) -> None:
    moved = tmp_path / "policy.toml"
    moved.write_text(DEMO_POLICY.read_text().replace('tenant = "acme"', 'tenant = "globex"'))
    result = runner.invoke(
        app,
        ["inventory", "--registry", REGISTRY_REF, "--policy", str(moved), "--check",
         str(GOLDEN / "effects.lock")],
    )  # fmt: skip
    assert result.exit_code == 1, result.output
    assert "principal:alice: tenant_moved: acme → globex" in result.output
    assert "principal:alice billing_invoice_get: new_credential: BILLING_TOKEN_GLOBEX" in (
        result.output
    )


# -- secrets -------------------------------------------------------------------------------


def test_credential_values_never_appear_in_any_output(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    secrets = {name: f"tok_live_{name.lower()}_0123456789SECRET" for name in NAMES}
    for name, value in secrets.items():
        monkeypatch.setenv(name, value)
    outputs: dict[str, str] = {}
    for fmt in ("table", "json", "markdown"):
        result = runner.invoke(app, [*BASE, "--all", "--format", fmt])
        assert result.exit_code == 0, result.output
        assert "BILLING_TOKEN_ACME" in result.output  # alice's tenant's name is listed ...
        outputs[fmt] = result.output
    lock = tmp_path / "effects.lock"
    assert runner.invoke(app, [*BASE, "--all", "--lock", str(lock)]).exit_code == 0
    outputs["lock"] = lock.read_text()
    # A lock from before the tools used BILLING_TOKEN_ACME: the check reports it as growth.
    old = json.loads(outputs["lock"])
    for tool in old["subjects"]["principal:alice"]["tools"].values():
        tool["credentials"].remove("BILLING_TOKEN_ACME")
    # In the exact form --lock writes: any other text is refused as edited by hand.
    lock.write_text(json.dumps(old, indent=2, sort_keys=True) + "\n")
    check = runner.invoke(app, [*BASE, "--check", str(lock)])
    assert check.exit_code == 1, check.output
    assert "new_credential: BILLING_TOKEN_ACME" in check.output
    outputs["check"] = check.output
    program = tmp_path / "p.py"
    program.write_text("tools.billing_invoice_get(invoice_id='inv_1')\n")
    for fmt in ("table", "json"):
        args = ["program-effects", str(program), "--registry", REGISTRY_REF]
        result = runner.invoke(app, [*args, "--policy", POLICY_ARG, "--format", fmt])
        assert result.exit_code == 0, result.output
        outputs[f"program-effects {fmt}"] = result.output
    for what, output in outputs.items():
        for value in secrets.values():
            assert value not in output, what  # ... their values never are
