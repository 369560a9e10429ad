"""Stopping a worker loses no call, whoever sends the signal (issue 14 item 1).

Celery's warm shutdown (SIGTERM or the first SIGINT to the main process) stops taking
messages and waits for the calls its pool is running. But supervisors that signal a whole
process group — honcho, ``kill -- -PGID``, a terminal's Ctrl-\\ — also send SIGTERM to the
prefork pool's children, which then die at once in the middle of a call (celery#4795): a
running read answered as a failure, a running mutation requeued (acks late) and run again
later. Pool children already ignore SIGINT (billiard's ``process_initializer``); here they
ignore SIGTERM too: :func:`ignore_group_sigterm` runs in ``worker_process_init``, after
``process_initializer`` reset SIGTERM to its default. A child then finishes its call, the
main process's warm shutdown waits for it and closes the pool, and the child exits when
the pool tells it to.

Not ``REMAP_SIGTERM=SIGQUIT`` (Celery's own option), which turns SIGTERM into a cold
shutdown: the main process would stop without waiting for running calls.

Cold shutdown (SIGQUIT, or a second SIGINT/SIGTERM to the main process): Celery
terminates the pool; children ignoring SIGTERM finish their call first, and a mutation
whose child is killed (SIGKILL after the supervisor's grace period) is acked late, so it
is requeued and, being idempotent by execution id, applied once. A hard stop is SIGKILL
(what every supervisor sends after its grace period: ``stop_grace_period`` in compose,
``TimeoutStopSec`` in systemd) — keep that period above the longest call's timeout.
"""

from __future__ import annotations

import signal

__all__ = ["ignore_group_sigterm"]


def ignore_group_sigterm() -> None:
    """Ignore SIGTERM in this process (a prefork pool child): its main process decides
    when it stops."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
