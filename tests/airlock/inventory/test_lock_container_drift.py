"""A change to the container's settings that no field of the sandbox's effect set describes
(an airlock upgrade, a patched hardening module) still fails ``--check``: the lock holds
every other setting as ``other_settings``, and any change to them is growth, both ways."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import airlock.sandbox._config as config_module
from airlock.cli import app
from airlock.inventory import (
    EffectLock,
    Selection,
    build_inventory,
    compare_locks,
    lock_from_inventory,
    lock_text,
    render_changes,
    sandbox_effects,
)
from airlock.policies import SandboxProfile
from airlock.sandbox._hardening import container_config
from airlock.tools import Registry
from tests.airlock.inventory_registry import POLICY_ARG, REGISTRY_REF, REPO

SELECTION = Selection(every_principal=True, principals=(), roles=(), tenant=None)
Edit = Callable[[dict[str, Any]], None]

DRIFT: dict[str, Edit] = {
    "privileged": lambda c: c.update(privileged=True),
    "host pid namespace": lambda c: c.update(pid_mode="host"),
    "host ipc namespace": lambda c: c.update(ipc_mode="host"),
    "a device": lambda c: c.update(devices=["/dev/kmsg:/dev/kmsg:rwm"]),
    "a sysctl": lambda c: c.update(sysctls={"net.ipv4.ip_forward": "1"}),
    "apparmor unconfined": lambda c: c.update(
        security_opt=[*c["security_opt"], "apparmor=unconfined"]
    ),
    "network enabled": lambda c: c.update(network_disabled=False),
    "ipc_mode dropped": lambda c: c.pop("ipc_mode"),
}


def _patch(monkeypatch: pytest.MonkeyPatch, edit: Edit | None) -> None:
    def edited(*args: Any, **kwargs: Any) -> dict[str, Any]:
        config = container_config(*args, **kwargs)
        if edit is not None:
            edit(config)
        return config

    monkeypatch.setattr(config_module, "container_config", edited)


def _lock(monkeypatch: pytest.MonkeyPatch, edit: Edit | None) -> EffectLock:
    _patch(monkeypatch, edit)
    sandbox = sandbox_effects(SandboxProfile(), image="img", image_digest="sha256:x")
    inventory = build_inventory(Registry(), [], sandbox=sandbox, registry="r", policy="p")
    return lock_from_inventory(inventory, SELECTION)


@pytest.mark.parametrize("case", sorted(DRIFT))
def test_drift_outside_the_described_fields_is_growth_both_ways(
    case: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    hardened, drifted = _lock(monkeypatch, None), _lock(monkeypatch, DRIFT[case])
    for old, new in ((hardened, drifted), (drifted, hardened)):
        changes = compare_locks(old, new)
        assert changes, case
        assert {c.direction for c in changes} == {"growth"}, render_changes(changes)
        assert {c.kind for c in changes} == {"sandbox_widened"}
        assert all(c.detail.startswith("other_settings ") for c in changes)


def test_the_drift_names_each_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    hardened = _lock(monkeypatch, None)
    drifted = _lock(monkeypatch, DRIFT["privileged"])
    text = render_changes(compare_locks(hardened, drifted))
    assert "GROWTH  sandbox: sandbox_widened: other_settings + privileged: true" in text


def test_a_lock_written_before_other_settings_fails_the_check_but_reads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/airlock-test-docker.sock")
    monkeypatch.chdir(REPO)
    base = ["inventory", "--registry", REGISTRY_REF, "--policy", POLICY_ARG]
    lock = tmp_path / "effects.lock"
    runner = CliRunner()
    assert runner.invoke(app, [*base, "--lock", str(lock)]).exit_code == 0
    data = json.loads(lock.read_text())
    assert data["sandbox"]["other_settings"]
    del data["sandbox"]["other_settings"]  # as an airlock without the field wrote it
    lock.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    check = runner.invoke(app, [*base, "--check", str(lock)])
    assert check.exit_code == 1, check.output
    assert "sandbox_widened: other_settings + ipc_mode" in check.output


def test_the_lock_text_holds_other_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    assert '"other_settings": [' in lock_text(_lock(monkeypatch, None))
