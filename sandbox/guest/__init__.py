"""The guest: modules that run inside the sandbox container, standard library only.

``Dockerfile.sandbox`` copies them, with the shared contract ``bridge/airlock_wire.py``, into
one directory of the image, where they import each other as top-level modules
(``airlock_runner`` puts its own directory on the path). On the host they are shipped and
type-checked, never imported as ``airlock.sandbox.guest.*`` (but for ``airlock_seccomp``, whose
rule list the host renders for ``airlock doctor`` and the effect inventory).

What the runner imports before a program runs is CPU that every container spends, so the
modules a runner loads import neither ``typing`` nor anything that imports ``re`` (``re``
imports ``enum``; milliseconds of CPU in every container): each says
``TYPE_CHECKING = False``, which mypy reads as typing's, and imports its annotations' types
under it; JSON comes from the C accelerator (``airlock_frames``), the seccomp layer ready
compiled (``airlock_confine``), and a failing program's traceback imports ``traceback`` when
it is needed. ``tests/sandbox/test_container_config.py`` checks it in the image.
"""
