"""``python -m airlock.cli``: the ``airlock`` command."""

from airlock.cli import main

main()
