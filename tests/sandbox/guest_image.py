"""The guest's modules laid out as the sandbox image lays them out, for tests on the host.

The layout is read from ``Dockerfile.sandbox`` itself (every ``.py`` source its ``COPY``
lines put in :data:`GUEST_HOME`), so these tests run the same files, side by side, that a
container runs: the guest modules and the contract it shares with the host.
"""

from __future__ import annotations

import atexit
import importlib
import importlib.util
import os
import shutil
import sys
import tempfile
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile.sandbox"
GUEST_HOME = "/opt/airlock/"


def dockerfile_lines() -> list[str]:
    """The Dockerfile's instructions, continuation lines joined."""
    return DOCKERFILE.read_text().replace("\\\n", " ").splitlines()


def image_sources() -> list[Path]:
    """The Python files the image's ``COPY`` instructions put in :data:`GUEST_HOME`."""
    sources: list[Path] = []
    for line in dockerfile_lines():
        words = line.split()
        if words[:1] == ["COPY"] and words[-1] == GUEST_HOME:
            for pattern in words[1:-1]:
                if pattern.endswith(".py"):
                    sources.extend(sorted(ROOT.glob(pattern)))
    return sources


_INHERITED = "AIRLOCK_TEST_GUEST_DIR"
"""Where the test process laid the guest out: processes it spawns (which import this module
afresh, and may end without running ``atexit``) use its copy and leave nothing behind."""


def _assemble() -> Path:
    inherited = os.environ.get(_INHERITED)
    if inherited and Path(inherited).is_dir():
        return Path(inherited)
    home = Path(tempfile.mkdtemp(prefix="airlock-guest-"))
    atexit.register(shutil.rmtree, home, ignore_errors=True)
    os.environ[_INHERITED] = str(home)
    for source in image_sources():
        shutil.copy(source, home / source.name)
    return home


GUEST_DIR = _assemble()
RUNNER = GUEST_DIR / "airlock_runner.py"


def load_guest(name: str) -> ModuleType:
    """A guest module imported as the runner imports it: top-level, from :data:`GUEST_DIR`."""
    if str(GUEST_DIR) not in sys.path:
        sys.path.insert(0, str(GUEST_DIR))
    return importlib.import_module(name)


def load_runner() -> ModuleType:
    """A fresh copy of the guest runner, its guest modules imported as in the image (each
    caller's own, not shared through ``sys.modules``)."""
    load_guest("airlock_wire")  # puts GUEST_DIR on sys.path
    spec = importlib.util.spec_from_file_location("airlock_runner", RUNNER)
    assert spec
    assert spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
