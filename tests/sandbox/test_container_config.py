from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from airlock.bridge import ToolSession
from airlock.bridge.airlock_wire import RUN_WAITING, SOCKET_NAME, WARM_WHEN_IDLE
from airlock.policies import ContainerRuntime, SandboxProfile
from airlock.sandbox import (
    UNKNOWN_DIGEST,
    ContainerMount,
    DockerBackend,
    RunResult,
    check_engine,
    describe_container,
    read_image_digest,
    resolve_inputs,
)
from airlock.sandbox._hardening import GUEST_MOUNT, WarmUp, container_config
from airlock.sandbox._pool import DEMAND_S
from airlock.sandbox._users import FIRST_UID
from tests.bridge.records import ALICE, GRANT, build_registry
from tests.conftest import IMAGE, require_docker
from tests.sandbox.guest_image import load_guest
from tests.sandbox.runtimes import RUNTIMES, require_runtime


def test_config_carries_every_hardening_setting() -> None:
    profile = SandboxProfile(memory_bytes=128 * 2**20, pids_limit=32, cpus=0.5)
    config = container_config(profile, image="img", socket_dir=Path("/s"), labels={"l": "1"})
    assert config["network_mode"] == "none"
    assert config["network_disabled"] is True
    assert config["read_only"] is True
    assert config["tmpfs"] == {
        # A file or directory per KiB of room at most (test_limits.py: file_count_fill).
        "/tmp": f"rw,noexec,nosuid,nodev,nr_inodes=16384,size={profile.tmpfs_bytes},mode=1777",
        # The limit, and a page more for each of its 64 files (each takes whole pages) and
        # one more for the runner's check: files that hold the limit's bytes fit.
        "/out": f"rw,noexec,nosuid,nodev,nr_inodes=32768,size={2**25 + 65 * 4096},mode=1777",
    }
    assert config["mounts"] == []  # inputs only when a run is given some
    uid, gid = (int(n) for n in config["user"].split(":"))  # one of its own (test_users.py)
    assert uid == gid >= FIRST_UID
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
    assert config["runtime"] == "runc"
    assert {"/proc/cmdline", "/proc/sys/kernel/random/boot_id", "/proc/kcore"} <= set(
        config["masked_paths"]
    )
    assert "privileged" not in config
    assert "devices" not in config


@pytest.mark.parametrize(
    ("warm_up", "flags"),
    [("first", []), ("when_idle", [WARM_WHEN_IDLE]), ("never", [RUN_WAITING])],
)
def test_a_container_tells_its_runner_when_to_warm_up(warm_up: WarmUp, flags: list[str]) -> None:
    config = container_config(
        SandboxProfile(), image="i", socket_dir=Path("/s"), labels={}, warm_up=warm_up
    )
    assert config["command"] == [f"{GUEST_MOUNT}/{SOCKET_NAME}", *flags]


@pytest.mark.docker
def test_a_pooled_runner_warms_up_and_one_started_for_a_waiting_run_does_not() -> None:
    require_docker()
    program = "import sys\n'asyncio' in sys.modules\n"
    full = SandboxProfile(language_mode="full")

    async def warmed(pool_size: int) -> object:
        async with DockerBackend(image=IMAGE, profile=full, pool_size=pool_size) as backend:
            await backend.pool.wait_ready(pool_size, timeout=60)
            return (await backend.run(program)).value

    assert asyncio.run(warmed(1)) is True
    assert asyncio.run(warmed(0)) is False


@pytest.mark.docker
def test_a_container_the_pool_started_during_a_burst_is_warm_once_the_burst_is_over() -> None:
    require_docker()
    program = "import sys\n'asyncio' in sys.modules\n"
    full = SandboxProfile(language_mode="full")

    async def after_a_burst() -> list[object]:
        async with DockerBackend(image=IMAGE, profile=full, pool_size=1) as backend:
            await backend.pool.wait_ready(1, timeout=60)
            # Two at once: the second finds the pool empty, so the refill does not warm up
            # before it is ready...
            burst = await asyncio.gather(backend.run(program), backend.run(program))
            await backend.pool.wait_ready(1, timeout=60)
            await asyncio.sleep(DEMAND_S + load_guest("airlock_warm_up").IDLE_MS / 1000 + 3.0)
            # ...but once it has waited idle.
            return [*(r.value for r in burst), (await backend.run(program)).value]

    values = asyncio.run(after_a_burst())
    assert values[2] is True, values


# What a runner in the image does not import before a program that needs none of it: the
# typing, re and enum modules (pyseccomp and the json package would import them) and what a
# failing program's traceback needs. Each is CPU that every container started for one run
# would spend.
NOT_IMPORTED_BY_A_COLD_RUNNER = (
    "airlock_seccomp", "ast", "enum", "json", "pyseccomp", "re", "traceback", "typing",
)  # fmt: skip


@pytest.mark.docker
def test_a_runner_in_the_image_imports_no_typing_re_or_json_before_its_program() -> None:
    require_docker()
    program = f"import sys\n[m for m in {NOT_IMPORTED_BY_A_COLD_RUNNER!r} if m in sys.modules]\n"

    async def loaded() -> object:
        full = SandboxProfile(language_mode="full")
        async with DockerBackend(image=IMAGE, profile=full, pool_size=0) as backend:
            result = await backend.run(program)
            assert result.status == "ok", result.error
            return result.value

    assert asyncio.run(loaded()) == []


# A runner started for a waiting run imports nothing ahead: the program's imports (C
# extensions among them) and its event loop come after the second seccomp layer.
COLD_PROGRAMS = {
    "restricted": """
import asyncio, csv, datetime, decimal, statistics
async def main():
    return await asyncio.gather(*(tools.records_item_get.aio(record_id=f"rec_{n}") for n in (1, 2)))
rows = await main()
[len(rows), str(decimal.Decimal("1.1") + 1), statistics.mean([1, 2, 3])]
""",
    "full": """
import asyncio, decimal, ssl, statistics, sys
rows = await asyncio.gather(*(tools.records_item_get.aio(record_id=f"rec_{n}") for n in (1, 2)))
[len(rows), str(decimal.Decimal("1.1") + 1), statistics.mean([1, 2, 3])]
""",
}


@pytest.mark.docker
@pytest.mark.parametrize("mode", sorted(COLD_PROGRAMS))
def test_a_runner_that_did_not_warm_up_imports_and_awaits_under_its_filter(mode: str) -> None:
    require_docker()
    profile = SandboxProfile.model_validate({"language_mode": mode})
    tools = ToolSession(registry=build_registry(), principal=ALICE, grant=GRANT)

    async def run() -> RunResult:
        async with DockerBackend(image=IMAGE, profile=profile, pool_size=0) as backend:
            return await backend.run(COLD_PROGRAMS[mode], tools=tools)

    result = asyncio.run(run())
    assert (result.status, result.value) == ("ok", [2, "2.1", 2]), result.error


def test_the_description_says_what_the_config_says() -> None:
    profile = SandboxProfile(
        memory_bytes=128 * 2**20,
        pids_limit=32,
        cpus=0.5,
        tmpfs_bytes=2**21,
        artifact_limit_bytes=2**22,
    )
    described = describe_container(profile, image="img")
    assert described.image == "img"
    assert described.network_mode == "none"
    assert described.read_only_root
    assert described.user == "distinct"
    fixed = describe_container(profile.model_copy(update={"user": "4000:4000"}), image="img")
    assert fixed.user == "4000:4000"
    assert described.capabilities == ()
    assert described.no_new_privileges
    assert described.environment == ()
    assert (described.memory_bytes, described.swap_bytes) == (128 * 2**20, 0)
    assert (described.cpus, described.pids_limit, described.open_files) == (0.5, 32, 256)
    assert described.seccomp_filter == profile.docker_seccomp()
    assert described.mounts == (
        ContainerMount(
            path="/out",
            kind="tmpfs",
            options="rw,noexec,nosuid,nodev,nr_inodes=4096",
            size_bytes=2**22 + 65 * 4096,  # a page more for each file the limit allows, and one
        ),
        ContainerMount(path=GUEST_MOUNT, kind="bind", options="ro", size_bytes=None),
        ContainerMount(
            path="/tmp",
            kind="tmpfs",
            options="rw,noexec,nosuid,nodev,nr_inodes=2048",
            size_bytes=2**21,
        ),
    )


def test_inputs_are_bind_mounted_read_only_by_their_real_path(tmp_path: Path) -> None:
    data = tmp_path / "sales.csv"
    data.write_text("a\n1\n")
    data.chmod(0o644)
    folder = tmp_path / "reports"
    folder.mkdir()
    folder.chmod(0o755)
    inputs = resolve_inputs({"sales.csv": data, "reports": folder}, limit_bytes=2**20)
    config = container_config(
        SandboxProfile(), image="img", socket_dir=Path("/s"), labels={}, inputs=inputs
    )
    assert [(m["Target"], m["Source"], m["Type"], m["ReadOnly"]) for m in config["mounts"]] == [
        ("/data/reports", str(folder.resolve()), "bind", True),
        ("/data/sales.csv", str(data.resolve()), "bind", True),
    ]


def test_runsc_is_asked_of_the_engine_with_room_for_gvisors_threads() -> None:
    profile = SandboxProfile(runtime="runsc", pids_limit=32)
    config = container_config(profile, image="img", socket_dir=Path("/s"), labels={})
    assert config["runtime"] == "runsc"
    assert config["pids_limit"] == profile.engine_pids_limit > 32
    seccomp = json.loads(config["security_opt"][1].removeprefix("seccomp="))
    assert seccomp == profile.docker_seccomp()
    described = describe_container(profile, image="img")
    assert (described.runtime, described.pids_limit) == ("runsc", profile.engine_pids_limit)


def test_crun_is_asked_of_the_engine_with_every_setting_runc_gets() -> None:
    # crun is a cheaper way to the same container, never a different one: only the runtime's
    # name differs from what runc is asked for.
    runc = container_config(SandboxProfile(), image="img", socket_dir=Path("/s"), labels={})
    crun = container_config(
        SandboxProfile(runtime="crun"), image="img", socket_dir=Path("/s"), labels={}
    )
    assert crun["runtime"] == "crun"
    assert {**crun, "runtime": "runc", "user": "-"} == {**runc, "user": "-"}  # (one uid each)
    assert describe_container(SandboxProfile(runtime="crun"), image="img").runtime == "crun"


@pytest.mark.docker
@pytest.mark.parametrize("runtime", RUNTIMES)
def test_the_engine_offers_every_runtime_a_profile_may_choose(runtime: ContainerRuntime) -> None:
    require_runtime(runtime)
    found = check_engine(IMAGE, runtime=runtime)
    assert [(f.check, f.ok) for f in found] == [
        ("engine reachable", True),
        (f"runtime {runtime}", True),
        ("sandbox image", True),
    ]


@pytest.mark.parametrize("mode", ["restricted", "full"])
def test_the_description_names_the_second_layer_of_the_mode(mode: str) -> None:
    described = describe_container(
        SandboxProfile.model_validate({"language_mode": mode}), image="i"
    )
    layer = described.guest_filter
    assert layer.mode == mode
    names = {rule.syscall for rule in layer.rules}
    assert {"execve", "socket", "ptrace", "personality", "memfd_create"} <= names
    assert ("fork" in names) == (mode == "restricted")
    assert layer.pfc is not None
    assert "pseudo filter code" in layer.pfc


def test_engine_questions_answer_without_an_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/airlock-test-docker.sock")
    assert read_image_digest("airlock-sandbox:latest", timeout=1) == UNKNOWN_DIGEST == "unknown"
    [finding] = check_engine("airlock-sandbox:latest", timeout=1)
    assert (finding.check, finding.ok) == ("engine reachable", False)
    assert "not reachable" in finding.seen or "did not answer" in finding.seen
    assert "make engine" in finding.fix


@pytest.mark.docker
def test_engine_questions_answer_from_the_engine() -> None:
    require_docker()
    found = check_engine(IMAGE)
    assert [(f.check, f.ok) for f in found] == [
        ("engine reachable", True),
        ("runtime runc", True),
        ("sandbox image", True),
    ]
    assert "sha256:" in read_image_digest(IMAGE)
    missing = check_engine("airlock-no-such-image:never")
    assert [(f.check, f.ok) for f in missing] == [
        ("engine reachable", True),
        ("runtime runc", True),
        ("sandbox image", False),
    ]
    assert "make image" in missing[2].fix
    assert read_image_digest("airlock-no-such-image:never") == UNKNOWN_DIGEST
    unknown = check_engine(IMAGE, runtime="no-such-runtime")
    assert [(f.check, f.ok) for f in unknown] == [
        ("engine reachable", True),
        ("runtime no-such-runtime", False),
    ]
    assert "make engine" in unknown[1].fix


@pytest.mark.parametrize(
    ("artifact_bytes", "artifact_files", "inodes"),
    [
        (2**25, 64, 32768),  # the default: a file per KiB is room enough
        (2**20, 2000, 18000),  # few bytes, many files: room for every file the limit allows
        (2**20, 10, 1024),  # never under 1,024
    ],
)
def test_out_holds_every_file_its_artifact_limit_allows(
    artifact_bytes: int, artifact_files: int, inodes: int
) -> None:
    profile = SandboxProfile(
        artifact_limit_bytes=artifact_bytes, artifact_limit_files=artifact_files
    )
    config = container_config(profile, image="img", socket_dir=Path("/s"), labels={})
    assert f"nr_inodes={inodes}," in config["tmpfs"]["/out"]
