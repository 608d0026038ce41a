"""Build ``.build/import-tree/airlock``: the installed package layout, as links into the repo.

The repository keeps ``policies/``, ``tools/``, ``bridge/`` and ``sandbox/`` at its top level
and installs them as ``airlock.policies`` and so on (``[tool.setuptools.package-dir]`` in
``pyproject.toml``). Python's import system follows that mapping in an editable install; mypy
finds modules by path only, so ``make types`` points it at this tree instead. The tree is
rebuilt on every call and holds nothing but links, so it can never go stale.
"""

from __future__ import annotations

import shutil
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TREE = ROOT / ".build" / "import-tree"


def build() -> Path:
    """Rebuild the tree from ``pyproject.toml``; its root, for ``mypy_path``."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    mapping: dict[str, str] = config["tool"]["setuptools"]["package-dir"]
    package = TREE / "airlock"
    shutil.rmtree(TREE, ignore_errors=True)
    package.mkdir(parents=True)
    for entry in sorted((ROOT / "airlock").iterdir()):
        if entry.name != "__pycache__":
            (package / entry.name).symlink_to(entry)
    for name, folder in sorted(mapping.items()):
        top, _, sub = name.partition(".")
        if top != "airlock" or not sub or "." in sub:
            sys.exit(f"import_tree: cannot place {name!r}; expected airlock.NAME")
        (package / sub).symlink_to(ROOT / folder)
    return TREE


if __name__ == "__main__":
    print(build())
