"""``python -m examples.billing``: run the billing service until interrupted."""

from examples.billing.server import main

main()
