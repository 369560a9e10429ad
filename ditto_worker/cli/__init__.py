"""The ``ditto-worker`` command line (:mod:`.commands`), the demo and the evaluation."""

from __future__ import annotations

from ditto_worker.cli.commands import app, main

__all__ = ["app", "main"]
