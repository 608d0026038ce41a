"""Clearing what programs leave in a container that serves more than one, whatever they did.

Standard library only. Every process of a container runs as one user, so a program owns each
directory it makes: it may take its own permissions away from one (``chmod 0``), or nest
directories thousands deep. ``shutil.rmtree`` leaves both (it cannot open the first, and its
recursion and the paths it builds stop it in the second), and the next program of the same
principal would find them. Here each directory is given its permissions back before it is
opened, and its subdirectories are moved up to the top before it is removed, so no more than
two directories are ever open and no path is longer than a name, however deep the tree went.
Links are removed, never followed. Only the zygote clears, once every program's process is
gone, so nothing changes a tree while it is cleared.
"""

from __future__ import annotations

import os

_DIRECTORY_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_HOISTED = ".airlock-clearing-"
_MAX_NAME_TRIES = 1000
"""Names tried for a directory moved up, before it is left where it is."""


def empty(directory: str) -> None:
    """Remove everything under ``directory``, not the directory itself."""
    try:
        top = os.open(directory, _DIRECTORY_FLAGS)
    except OSError:
        return
    try:
        while pending := os.listdir(top):
            if not _clear(top, pending):
                return  # nothing more would go: what is left stays
    finally:
        os.close(top)


def remove(path: str) -> None:
    """Remove ``path``, with everything under it if it is a directory."""
    parent, name = os.path.split(path)
    try:
        top = os.open(parent or ".", _DIRECTORY_FLAGS)
    except OSError:
        return
    try:
        _clear(top, [name])
    finally:
        os.close(top)


def _clear(top: int, pending: list[str]) -> bool:
    """Remove the entries of the directory ``top`` named in ``pending``, and the directories
    moved up among them meanwhile; whether any went."""
    cleared = False
    taken = 0
    while pending:
        name = pending.pop()
        try:
            os.unlink(name, dir_fd=top)
            cleared = True
            continue
        except IsADirectoryError:
            pass
        except OSError:
            continue
        try:
            # Unlinking said it is a directory, not a link: its permissions may be changed.
            os.chmod(name, 0o700, dir_fd=top)
            inner = os.open(name, _DIRECTORY_FLAGS, dir_fd=top)
        except OSError:
            continue
        try:
            for child in os.listdir(inner):
                try:
                    os.unlink(child, dir_fd=inner)
                except IsADirectoryError:
                    taken = _move_up(inner, child, top, pending, taken)
                except OSError:
                    pass
        finally:
            os.close(inner)
        try:
            os.rmdir(name, dir_fd=top)
            cleared = True
        except OSError:
            pass
    return cleared


def _move_up(parent: int, name: str, top: int, pending: list[str], taken: int) -> int:
    """Move the directory ``name`` of ``parent`` to ``top`` under a name of its own, to be
    cleared there (added to ``pending``); the count of names taken so far."""
    try:
        # Moving a directory rewrites its ``..``: it needs its write permission back first.
        os.chmod(name, 0o700, dir_fd=parent)
    except OSError:
        return taken
    for _ in range(_MAX_NAME_TRIES):
        taken += 1
        moved = f"{_HOISTED}{taken}"
        try:
            os.rename(name, moved, src_dir_fd=parent, dst_dir_fd=top)
        except OSError:
            continue  # that name is in use at the top
        pending.append(moved)
        break
    return taken


__all__ = ["empty", "remove"]
