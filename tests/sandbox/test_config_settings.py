"""``describe_container`` reports every setting the container is started with: the ones a
field of its own judges, and every other one as ``other_settings`` (one ``key: JSON`` line
each), so no change to the hardening's keyword arguments goes unseen by the inventory."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

import airlock.sandbox._config as config_module
from airlock.policies import SandboxProfile
from airlock.sandbox import describe_container
from airlock.sandbox._hardening import container_config

Edit = Callable[[dict[str, Any]], None]


def _set(**values: Any) -> Edit:
    return lambda config: config.update(values)


def _drop(key: str) -> Edit:
    return lambda config: config.pop(key)


def _security_opt(*more: str) -> Edit:
    return lambda config: config.update(security_opt=[*config["security_opt"], *more])


def _ulimit(name: str, soft: int, hard: int) -> Edit:
    def edit(config: dict[str, Any]) -> None:
        config["ulimits"] = [*config["ulimits"], {"Name": name, "Soft": soft, "Hard": hard}]

    return edit


# Changes a field of its own does not report: each shows in other_settings.
UNREPORTED: dict[str, Edit] = {
    "privileged": _set(privileged=True),
    "host pid namespace": _set(pid_mode="host"),
    "host ipc namespace": _set(ipc_mode="host"),
    "no ipc_mode (the engine's default)": _drop("ipc_mode"),
    "a device": _set(devices=["/dev/kmsg:/dev/kmsg:rwm"]),
    "a sysctl": _set(sysctls={"net.ipv4.ip_forward": "1"}),
    "apparmor unconfined": _security_opt("apparmor=unconfined"),
    "selinux labels off": _security_opt("label=disable"),
    "a second seccomp option": _security_opt("seccomp=unconfined"),
    "no seccomp filter": lambda c: c.update(
        security_opt=[c["security_opt"][0], "seccomp=unconfined"]
    ),
    "no new privileges turned off": _security_opt("no-new-privileges:false"),
    "network enabled": _set(network_disabled=False),
    "a key this airlock has never heard of": _set(cgroupns="host"),
    "another ulimit": _ulimit("memlock", -1, -1),
    "core dumps": _ulimit("core", 2**30, 2**30),
    "another command": _set(command=["/bin/sh"]),
    "logs kept": _set(log_config={"Type": "json-file", "Config": {}}),
}

# Changes a field of its own reports: other_settings stays as it is (judged once).
REPORTED: dict[str, Edit] = {
    "memory": _set(mem_limit=2**30, memswap_limit=2**30),
    "network mode": _set(network_mode="host"),
    "a capability": _set(cap_add=["SYS_ADMIN"]),
    "the seccomp filter": lambda c: c.update(security_opt=[c["security_opt"][0], "seccomp={}"]),
    "no new privileges off": lambda c: c.update(security_opt=c["security_opt"][1:]),
    "open files": lambda c: c.update(
        ulimits=[u for u in c["ulimits"] if u["Name"] != "nofile"]
        + [{"Name": "nofile", "Soft": 9999, "Hard": 9999}]
    ),
    "the runtime": _set(runtime="runsc"),
    "labels (per container)": _set(labels={"run": "x"}),
    "an environment variable's value": _set(environment={"A": "secret-value"}),
}


def _described(monkeypatch: pytest.MonkeyPatch, edit: Edit | None) -> tuple[str, ...]:
    def edited(*args: Any, **kwargs: Any) -> dict[str, Any]:
        config = container_config(*args, **kwargs)
        if edit is not None:
            edit(config)
        return config

    monkeypatch.setattr(config_module, "container_config", edited)
    return describe_container(SandboxProfile(), image="img").other_settings


@pytest.mark.parametrize("case", sorted(UNREPORTED))
def test_a_setting_no_field_reports_shows_in_other_settings(
    case: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert _described(monkeypatch, UNREPORTED[case]) != _described(monkeypatch, None)


@pytest.mark.parametrize("case", sorted(REPORTED))
def test_a_setting_a_field_reports_is_not_reported_twice(
    case: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert _described(monkeypatch, REPORTED[case]) == _described(monkeypatch, None)


def test_other_settings_are_sorted_lines_that_read_the_same_every_time() -> None:
    first = describe_container(SandboxProfile(), image="img").other_settings
    assert first == describe_container(SandboxProfile(), image="other").other_settings
    assert list(first) == sorted(first)
    assert 'ipc_mode: "none"' in first
    assert "network_disabled: true" in first
    assert 'ulimits: [{"Hard":0,"Name":"core","Soft":0}]' in first
    assert "security_opt: []" in first  # both of today's options have fields of their own
    assert not any("airlock-describe" in line or "seccomp" in line for line in first)
