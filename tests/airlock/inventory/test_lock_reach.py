"""The lock check on reach that hides outside the tools: self-approval, a principal's tenant
binding, a principal's entry removed, the seccomp filter's argument conditions and default
action, the sandbox user, a destination path with dot segments, a destination's port left to
its scheme's default, a Unix socket's path, and a hand-edited lock.

Each table row is a real change (to the policy file, or to the filter the sandbox profile
renders), built into a lock and judged both ways round, as in ``test_lock.py``."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from airlock.inventory import Change, compare_locks, read_lock, render_changes
from airlock.policies import SandboxProfile
from tests.airlock.inventory.test_lock import (
    BASE,
    CRM,
    FETCH,
    Edit,
    Expected,
    _cli,
    _judged,
    appended,
    both,
    lock_of,
    policy,
    same,
    sandboxed,
    tool,
)
from tests.airlock.inventory_registry import POLICY, POLICY_ARG

BOB = "principal:bob"
_BOB_ENTRY = POLICY.read_text()[POLICY.read_text().index("[principals.bob]") :]
# The ``*`` entry denies web_page_fetch too, so bob loses nothing without his own entry.
_DENY_FETCH_TO_ALL = policy(
    'roles = ["billing_reader"]\n',
    'roles = ["billing_reader"]\n\n[[principals."*".rules]]\nid = "nf"\naction = "deny"\n'
    'tools = ["web_page_fetch"]\n',
)
# Every principal holds what * holds: without its role, a new principal reaches no tool.
_STAR_BARE = policy('[principals."*"]\nroles = ["billing_reader"]\n', '[principals."*"]\n')
_MALLORY = '[principals.mallory]\ntenant = "acme"\neffects = ["read(file:*)"]\n'
_STAR_IN_ACME = policy('[principals."*"]\n', '[principals."*"]\ntenant = "acme"\n')


# name: (before, after, the change before -> after, the change after -> before)
POLICY_CHANGES: dict[str, tuple[Edit, Edit, Expected, Expected]] = {
    # Defect 1: the requester may approve their own write.
    "self approval on": (
        same,
        policy("version = 1\n", "version = 1\nself_approval = true\n"),
        "growth",
        "shrink",
    ),
    # Defect 2: a principal no entry binds acts in every tenant.
    "alice unbound from her tenant": (
        _STAR_IN_ACME,
        both(
            _STAR_IN_ACME, policy('[principals.alice]\ntenant = "acme"\n', "[principals.alice]\n")
        ),
        "growth",
        "shrink",
    ),
    "bob unbound from tenant default": (
        policy('[principals.bob]\ntenant = "acme"', '[principals.bob]\ntenant = "default"'),
        policy('[principals.bob]\ntenant = "acme"\n', "[principals.bob]\n"),
        "growth",
        "shrink",
    ),
    # Defect 3: without its entry, bob holds what * holds, and his deny rule is gone.
    "bob's entry removed with its deny rule": (
        same,
        policy(_BOB_ENTRY, ""),
        "growth",
        "growth",  # the entry back: bob's crm scope again
    ),
    "bob's entry removed, its deny rule moved to every principal": (
        _DENY_FETCH_TO_ALL,
        both(
            _DENY_FETCH_TO_ALL,
            policy(_BOB_ENTRY, ""),
        ),
        "shrink",
        "growth",
    ),
    # Defect 6: a fixed uid is shared, and may be a host user's.
    "sandbox user distinct to fixed": (same, sandboxed(user="1000:1000"), "growth", "shrink"),
    "sandbox user fixed to another fixed": (
        sandboxed(user="1000:1000"),
        sandboxed(user="2000:2000"),
        "growth",
        "growth",
    ),
    # Defect 8: a path with dot segments is not below the prefix it starts with.
    "destination path with ..": (
        tool(CRM, destinations=("https://crm.example/api",)),
        tool(CRM, destinations=("https://crm.example/api/../admin",)),
        "growth",
        "growth",
    ),
    "destination path with percent-encoded ..": (
        tool(CRM, destinations=("https://crm.example/api",)),
        tool(CRM, destinations=("https://crm.example/api/.%2E/admin",)),
        "growth",
        "growth",
    ),
    "destination path with an encoded slash and ..": (
        tool(CRM, destinations=("https://crm.example/api",)),
        tool(CRM, destinations=("https://crm.example/api%2f..%2fadmin",)),
        "growth",
        "growth",
    ),
    "destination path with doubly encoded .": (
        tool(CRM, destinations=("https://crm.example/api",)),
        tool(CRM, destinations=("https://crm.example/api/%252e/x",)),
        "growth",
        "growth",
    ),
    "destination path below the prefix (no dot segment)": (
        tool(CRM, destinations=("https://crm.example/api",)),
        tool(CRM, destinations=("https://crm.example/api/..x/admin",)),
        "shrink",
        "growth",
    ),
    # A new principal's grant is reach even with no tool: a program reads input files by it.
    "a new principal reaching no tool, granted every file": (
        _STAR_BARE,
        both(_STAR_BARE, appended(_MALLORY)),
        "growth",
        "shrink",
    ),
    "a new principal with an empty grant": (
        _STAR_BARE,
        both(_STAR_BARE, appended('[principals.eve]\ntenant = "acme"\n')),
        "neutral",
        "neutral",
    ),
    # A port left out is the scheme's default where it has one, as a connection is checked.
    "https origin given another port": (
        tool(CRM, destinations=("https://crm.example",)),
        tool(CRM, destinations=("https://crm.example:22",)),
        "growth",
        "growth",
    ),
    "https origin given its default port": (
        tool(CRM, destinations=("https://crm.example",)),
        tool(CRM, destinations=("https://crm.example:443",)),
        "neutral",
        "neutral",
    ),
    "a host's port narrowed to an https origin": (
        tool(CRM, destinations=("crm.example:443",)),
        tool(CRM, destinations=("https://crm.example",)),
        "shrink",
        "growth",
    ),
    "postgres origin (no default port) given a port": (
        tool(CRM, destinations=("postgres://db.example",)),
        tool(CRM, destinations=("postgres://db.example:5432",)),
        "shrink",
        "growth",
    ),
    # A Unix socket's path is matched whole, not as a directory prefix.
    "a socket path to a socket below it": (
        tool(CRM, destinations=("unix:///run/app",)),
        tool(CRM, destinations=("unix:///run/app/x.sock",)),
        "growth",
        "growth",
    ),
    "a socket pattern to a socket it matches": (
        tool(CRM, destinations=("unix:///run/app/*.sock",)),
        tool(CRM, destinations=("unix:///run/app/x.sock",)),
        "shrink",
        "growth",
    ),
}


@pytest.mark.parametrize("case", sorted(POLICY_CHANGES))
def test_each_change_is_judged(case: str) -> None:
    before, after, forward, _ = POLICY_CHANGES[case]
    old, new = lock_of(before(BASE)), lock_of(after(BASE))
    assert old != new, "the edit must change the lock"
    changes = compare_locks(old, new)
    assert _judged(changes) == forward, render_changes(changes)


@pytest.mark.parametrize("case", sorted(POLICY_CHANGES))
def test_each_change_undone_is_judged(case: str) -> None:
    before, after, _, backward = POLICY_CHANGES[case]
    changes = compare_locks(lock_of(after(BASE)), lock_of(before(BASE)))
    assert _judged(changes) == backward, render_changes(changes)


def test_a_removed_entry_names_what_the_fallback_gives_more() -> None:
    _, after, _, _ = POLICY_CHANGES["bob's entry removed with its deny rule"]
    changes = compare_locks(lock_of(BASE), lock_of(after(BASE)))
    grown = {(c.subject, c.tool, c.kind) for c in changes if c.direction == "growth"}
    assert (BOB, FETCH, "new_tool") in grown
    assert not any(c.kind == "tenant_unbound" for c in changes)  # bob held * elsewhere already


def test_a_new_principal_with_no_tool_lists_its_grant() -> None:
    bare = _STAR_BARE(BASE)
    changes = compare_locks(lock_of(bare), lock_of(appended(_MALLORY)(bare)))
    mallory = {(c.direction, c.kind, c.detail) for c in changes if c.subject.endswith("mallory")}
    assert mallory == {
        ("growth", "new_subject", "tenant acme; reaches nothing"),
        ("growth", "grant_widened", "read(file:*)"),
    }


def test_the_inventory_shows_self_approval_and_every_tenant(tmp_path: Path) -> None:
    text = "self_approval = true\n" + POLICY.read_text()
    (tmp_path / "p.toml").write_text(text)
    table = _cli(str(tmp_path / "p.toml"), "--format", "table")
    assert "self approval: whoever asks for a write may approve it" in table.output
    assert "principal * (any principal not named; every tenant, computed in default)" in (
        table.output
    )
    data = json.loads(_cli(str(tmp_path / "p.toml"), "--format", "json").output)
    assert {s["name"]: (s["self_approval"], s["every_tenant"]) for s in data["subjects"]} == {
        "*": (True, True),
        "alice": (True, False),
        "bob": (True, False),
    }


# -- the seccomp filter (defect 5) -------------------------------------------------------

Filter = dict[str, Any]
FilterEdit = Callable[[Filter], Filter]


def _no_conditions(f: Filter) -> Filter:
    return {**f, "syscalls": [{k: v for k, v in r.items() if k != "args"} for r in f["syscalls"]]}


def _socket_family(family: int) -> FilterEdit:
    def edit(f: Filter) -> Filter:
        rules = [
            {**r, "args": [{**r["args"][0], "value": family}]} if r["names"] == ["socket"] else r
            for r in f["syscalls"]
        ]
        return {**f, "syscalls": rules}

    return edit


def _default(action: str) -> FilterEdit:
    return lambda f: {**f, "defaultAction": action}


def _read_only_on_fd0(f: Filter) -> Filter:
    rules = [{**r, "names": [n for n in r["names"] if n != "read"]} for r in f["syscalls"]]
    only = {"names": ["read"], "action": "SCMP_ACT_ALLOW"}
    only["args"] = [{"index": 0, "value": 0, "valueTwo": 0, "op": "SCMP_CMP_EQ"}]  # type: ignore[assignment]
    return {**f, "syscalls": [*rules, only]}


def _one_architecture(f: Filter) -> Filter:
    return {**f, "architectures": f["architectures"][:1]}


def _log_rule(f: Filter) -> Filter:
    return {**f, "syscalls": [*f["syscalls"], {"names": ["ptrace"], "action": "SCMP_ACT_LOG"}]}


def _keep(f: Filter) -> Filter:
    return f


# name: (before, after, the change before -> after, the change after -> before)
FILTER_CHANGES: dict[str, tuple[FilterEdit, FilterEdit, Expected, Expected]] = {
    "argument conditions dropped (socket any family, clone any flags)": (
        _keep,
        _no_conditions,
        "growth",
        "shrink",
    ),
    "socket allowed for another family": (_keep, _socket_family(2), "growth", "growth"),
    "default action allow": (_keep, _default("SCMP_ACT_ALLOW"), "growth", "shrink"),
    "default action log": (_keep, _default("SCMP_ACT_LOG"), "growth", "shrink"),
    "default action an unknown one": (_keep, _default("SCMP_ACT_WHATEVER"), "growth", "shrink"),
    "default action kill": (_keep, _default("SCMP_ACT_KILL_PROCESS"), "shrink", "growth"),
    "a condition put on a call that had none": (_keep, _read_only_on_fd0, "shrink", "growth"),
    "a call let through by a logging rule": (_keep, _log_rule, "growth", "shrink"),
    # Nothing judges the architectures: the hash changes, and that alone fails closed.
    "a change no rule judges": (_keep, _one_architecture, "growth", "growth"),
}


@contextmanager
def _filter(edit: FilterEdit) -> Iterator[None]:
    original = SandboxProfile.docker_seccomp
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(SandboxProfile, "docker_seccomp", lambda self: edit(original(self)))
        yield


def _filter_changes(before: FilterEdit, after: FilterEdit) -> list[Change]:
    with _filter(before):
        old = lock_of(BASE)
    with _filter(after):
        new = lock_of(BASE)
    assert old != new, "the edit must change the lock"
    return compare_locks(old, new)


@pytest.mark.parametrize("case", sorted(FILTER_CHANGES))
def test_each_filter_change_is_judged(case: str) -> None:
    before, after, forward, _ = FILTER_CHANGES[case]
    changes = _filter_changes(before, after)
    assert _judged(changes) == forward, render_changes(changes)


@pytest.mark.parametrize("case", sorted(FILTER_CHANGES))
def test_each_filter_change_undone_is_judged(case: str) -> None:
    before, after, _, backward = FILTER_CHANGES[case]
    changes = _filter_changes(after, before)
    assert _judged(changes) == backward, render_changes(changes)


def test_a_dropped_condition_names_the_call() -> None:
    changes = _filter_changes(_keep, _no_conditions)
    grown = {c.detail for c in changes if c.direction == "growth"}
    assert "seccomp_allowed + socket" in grown
    assert "seccomp_allowed + clone" in grown


# -- the lock file itself (defect 7) -------------------------------------------------------


def _duplicated(text: str) -> str:
    block = '"memory_bytes": 268435456,'
    assert text.count(block) == 1
    return text.replace(block, block + ' "memory_bytes": 8589934592,')


# name: (edit of the text --lock wrote, what the error says; None: accepted)
LOCK_EDITS: dict[str, tuple[Callable[[str], str], str | None]] = {
    "as written": (lambda text: text, None),
    "a key twice": (_duplicated, "the key 'memory_bytes' appears twice"),
    "compact JSON": (lambda text: json.dumps(json.loads(text)), "not in the exact form"),
    "keys reordered": (
        lambda text: json.dumps(dict(reversed(json.loads(text).items())), indent=2) + "\n",
        "not in the exact form",
    ),
    "no trailing newline": (lambda text: text.rstrip("\n"), "not in the exact form"),
    # NaN is written back as NaN, and no limit compares above or below it.
    "a limit not a number": (
        lambda text: re.sub(r'"timeout_s": [0-9.]+', '"timeout_s": NaN', text, count=1),
        "'NaN', which is not a number",
    ),
}


@pytest.mark.parametrize("case", sorted(LOCK_EDITS))
def test_a_lock_not_as_written_is_refused(tmp_path: Path, case: str) -> None:
    edit, reason = LOCK_EDITS[case]
    lock = tmp_path / "effects.lock"
    assert _cli(POLICY_ARG, "--all", "--lock", str(lock)).exit_code == 0
    lock.write_text(edit(lock.read_text()))
    result = _cli(POLICY_ARG, "--check", str(lock))
    if reason is None:
        assert result.exit_code == 0, result.output
        assert read_lock(lock).selection.every_principal
        return
    assert result.exit_code == 2, result.output
    assert "error (lock_file)" in result.output
    assert reason in result.output
    assert "--lock" in result.output  # how to write a fresh one
