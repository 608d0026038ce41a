"""``python -m airlock.billing``: run the billing service until interrupted."""

from airlock.billing.server import main

main()
