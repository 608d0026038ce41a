"""The guest: modules that run inside the sandbox container, standard library only.

``Dockerfile.sandbox`` copies them, with the shared contract ``bridge/airlock_wire.py``, into
one directory of the image, where they import each other as top-level modules
(``airlock_runner`` puts its own directory on the path). On the host they are shipped and
type-checked, never imported as ``airlock.sandbox.guest.*`` (but for ``airlock_seccomp``, whose
rule list the host renders for ``airlock doctor`` and the effect inventory).
"""
