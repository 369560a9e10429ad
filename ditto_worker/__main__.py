"""``python -m ditto_worker`` runs the ``ditto-worker`` command."""

from ditto_worker.cli import main

main()
