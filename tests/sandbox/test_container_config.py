from __future__ import annotations

import json
from pathlib import Path

from airlock.policies import SandboxProfile
from airlock.sandbox._container import GUEST_MOUNT, container_config


def test_config_carries_every_hardening_setting() -> None:
    profile = SandboxProfile(memory_bytes=128 * 2**20, pids_limit=32, cpus=0.5)
    config = container_config(profile, image="img", socket_dir=Path("/s"), labels={"l": "1"})
    assert config["network_mode"] == "none"
    assert config["read_only"] is True
    assert config["tmpfs"] == {
        "/tmp": f"rw,noexec,nosuid,nodev,size={profile.tmpfs_bytes},mode=1777"
    }
    assert config["user"] == "65534:65534"
    assert config["cap_drop"] == ["ALL"]
    assert config["security_opt"][0] == "no-new-privileges:true"
    seccomp = json.loads(config["security_opt"][1].removeprefix("seccomp="))
    assert seccomp == profile.docker_seccomp()
    assert config["mem_limit"] == config["memswap_limit"] == 128 * 2**20
    assert config["pids_limit"] == 32
    assert config["nano_cpus"] == 500_000_000
    assert {(u["Name"], u["Soft"], u["Hard"]) for u in config["ulimits"]} == {
        ("nofile", 256, 256),
        ("core", 0, 0),
    }
    assert config["environment"] == {}
    assert config["volumes"] == {"/s": {"bind": GUEST_MOUNT, "mode": "ro"}}
    assert config["labels"] == {"l": "1"}
    assert config["log_config"]["Type"] == "none"
    assert "privileged" not in config
    assert "devices" not in config
