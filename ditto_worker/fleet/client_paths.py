"""The fleet client's two ways of awaiting a reply (see :mod:`ditto_worker.fleet.client`).

* Redis result backend: one :class:`~ditto_worker.fleet.results.ResultListener` per
  client; a sync call publishes from its thread and blocks on a future, an asyncio call
  publishes on a sender thread and awaits the future; a cancel raises the call's flag;
  a timed-out call's message says when a worker for its queue was last seen.
* in-process (``memory://``): Celery's ``AsyncResult`` polled.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from concurrent.futures import FIRST_COMPLETED
from concurrent.futures import Future as ThreadFuture
from concurrent.futures import TimeoutError as ThreadTimeoutError
from concurrent.futures import wait as wait_futures
from typing import Any

from celery.exceptions import TaskRevokedError
from celery.exceptions import TimeoutError as CeleryTimeoutError
from kombu.exceptions import EncodeError, OperationalError
from redis.exceptions import RedisError

from ditto_worker.contracts import NodeResult
from ditto_worker.errors import ErrorCode
from ditto_worker.fleet.cancellation import CANCEL_CHANNEL, cancel_key
from ditto_worker.fleet.celery_app import queue_for
from ditto_worker.fleet.client_base import (
    CANCEL_POLL_S,
    FLAG_WAIT_S,
    SEEN_WAIT_S,
    ClientBase,
    get_key,
    log,
    settle_future,
)
from ditto_worker.fleet.failures import LOST_CONNECTION, NodeFailed, lost_connection
from ditto_worker.fleet.heartbeat import describe_last_seen, heartbeat_key
from ditto_worker.runtime.calls import Call
from ditto_worker.runtime.cancel import local_registry

__all__ = ["LOST_REPLY", "ClientPaths"]

LOST_REPLY = (
    "{at} was lost while the call waited for its reply; whether it ran is unknown: retry "
    "with the same operation id"
)
"""The message of a call that ended ``FLEET_UNAVAILABLE`` because the result backend was
lost while it waited (``at``: ``the result backend (host:port)``)."""


class ClientPaths(ClientBase):
    """The listener path (Redis) and the polling path (in-process) of a call."""

    # --- Redis fleet: the listener path ---------------------------------------------------

    def _invoke_listening(self, call: Call) -> NodeResult[Any]:
        """The sync path: publish from this thread, block on the listener's future."""
        listener = self._listener
        assert listener is not None
        eid, deadline, cancel = call.execution_id, call.deadline, call.cancel
        losses = listener.losses
        result, setup = listener.expect(eid)
        stop: ThreadFuture[None] = ThreadFuture()
        unregister = cancel.on_cancel(lambda: settle_future(stop)) if cancel is not None else None
        try:
            if setup is not None:
                try:
                    setup.result(timeout=max(0.0, deadline - time.time()))
                except ThreadTimeoutError:
                    return call.timed_out("the fleet did not take the call in time")
                except RedisError as exc:
                    return self._unreachable(call, exc)
            try:
                self._send(call)
            except (EncodeError, OperationalError) as exc:
                return self._sendfailure(exc, call)
            waited: list[ThreadFuture[Any]] = [result, stop]
            wait_futures(waited, timeout=max(0.0, deadline - time.time()),
                         return_when=FIRST_COMPLETED)  # fmt: skip
            if result.done() and not result.cancelled():
                return self._from_meta(result.result(), call, stop.done())
            if stop.done():
                with contextlib.suppress(Exception):
                    listener.submit(self._acancel(eid, deadline)).result(FLAG_WAIT_S)
                return call.cancelled()
            # past the deadline the worker stops the call itself (ditto_deadline header) and
            # never starts it (expires): no flag needed, the revoke is a courtesy
            self._revoke_later(eid)
            if listener.lost_since(losses):
                return self._lost_reply(call)
            return call.timed_out(self._with_last_seen(call.node, "the call timed out"))
        finally:
            if unregister is not None:
                unregister()
            listener.forget(eid)

    async def _acall(self, call: Call) -> NodeResult[Any]:
        """The asyncio path: publish on a sender thread, await the listener's future."""
        listener = self._listener
        assert listener is not None
        eid, deadline, cancel = call.execution_id, call.deadline, call.cancel
        loop = asyncio.get_running_loop()
        cancelled = asyncio.Event()

        def on_cancel() -> None:  # any thread; the call may have ended and its loop closed
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(cancelled.set)

        unregister = cancel.on_cancel(on_cancel) if cancel else None
        losses = listener.losses
        result, setup = listener.expect(eid)
        waiter: asyncio.Future[Any] | None = None
        try:
            if setup is not None:
                await asyncio.wait_for(asyncio.wrap_future(setup), deadline - time.time())
            send = loop.run_in_executor(self._senders, self._send, call)
            try:  # a send still queued at the deadline may go out later: it expires unrun
                await asyncio.wait_for(send, max(0.0, deadline - time.time()))
            except (EncodeError, OperationalError) as exc:
                return self._sendfailure(exc, call)
            answer = asyncio.wrap_future(result)
            waiting: set[asyncio.Future[Any]] = {answer}
            if cancel is not None:  # a call that cannot be cancelled waits on its answer only
                waiter = loop.create_task(cancelled.wait())
                waiting.add(waiter)
            await asyncio.wait(
                waiting, timeout=max(0.0, deadline - time.time()),
                return_when=asyncio.FIRST_COMPLETED,
            )  # fmt: skip
            if answer.done() and not answer.cancelled():
                return self._from_meta(answer.result(), call, cancelled.is_set())
            answer.cancel()
            if cancelled.is_set():
                await asyncio.wrap_future(listener.submit(self._acancel(eid, deadline)))
                return call.cancelled()
            self._revoke_later(eid)
            if listener.lost_since(losses):
                return self._lost_reply(call)
            seen = await self._alast_seen(call.node)
            return call.timed_out(f"the call timed out: {seen}" if seen else "the call timed out")
        except TimeoutError:
            self._revoke_later(eid)
            return call.timed_out("the fleet did not take the call in time")
        except RedisError as exc:
            return self._unreachable(call, exc)
        finally:
            if waiter is not None:
                waiter.cancel()
            if unregister is not None:
                unregister()
            listener.forget(eid)

    def _lost_reply(self, call: Call) -> NodeResult[Any]:
        """A call unanswered at its deadline while the result backend was lost meanwhile:
        its reply may never come (the worker could not store it, or a restarted server
        lost it), so it is the fleet's outage — ``failed`` / ``FLEET_UNAVAILABLE`` — not a
        slow node's ``timeout``. Its outcome is unknown: a mutation may have been applied,
        and a retry with the same operation id applies it at most once (MEM-RUN-7)."""
        return call.failed(ErrorCode.FLEET_UNAVAILABLE, LOST_REPLY.format(at=self._backend_at))

    def _with_last_seen(self, node: str, message: str) -> str:
        """``message`` plus when a worker for ``node``'s queue was last seen
        (:mod:`ditto_worker.fleet.heartbeat`); read only for a call that timed out."""
        listener = self._listener
        if listener is None:
            return message
        queue = queue_for(node)
        try:
            raw = listener.submit(get_key(listener, heartbeat_key(queue))).result(SEEN_WAIT_S)
        except Exception:  # Redis down or slow: the plain message
            return message
        return f"{message}: {describe_last_seen(queue, raw)}"

    async def _alast_seen(self, node: str) -> str | None:
        """:meth:`_with_last_seen` for the asyncio path: the sentence, or ``None``."""
        listener = self._listener
        if listener is None:
            return None
        queue = queue_for(node)
        try:
            read = listener.submit(get_key(listener, heartbeat_key(queue)))
            raw = await asyncio.wait_for(asyncio.wrap_future(read), SEEN_WAIT_S)
        except Exception:
            return None
        return describe_last_seen(queue, raw)

    async def _acancel(self, eid: str, deadline: float) -> None:
        """Flag ``eid`` cancelled (stops it if running, prevents it if not) and revoke it.

        Runs on the listener's loop."""
        listener = self._listener
        assert listener is not None
        ttl_s = max(1, int(deadline - time.time()) + 60)
        try:
            await listener.client.set(cancel_key(eid), b"1", ex=ttl_s)
            await listener.client.publish(CANCEL_CHANNEL, eid)
        except RedisError:
            log.warning("could not raise the cancel flag of %s", eid)
        self._revoke_later(eid)

    # --- in-process: the polling path ----------------------------------------------------

    def _invoke_polling(self, call: Call) -> NodeResult[Any]:
        try:
            self._send(call)
        except (EncodeError, OperationalError) as exc:
            return self._sendfailure(exc, call)
        eid, cancel = call.execution_id, call.cancel
        result = self.app.AsyncResult(eid)
        while True:
            remaining = call.deadline - time.time()
            if remaining <= 0 or (cancel is not None and cancel.cancelled):
                local_registry().cancel(eid, reason="timeout" if remaining <= 0 else "cancelled")
                self._revoke_later(eid)
                return call.timed_out() if remaining <= 0 else call.cancelled()
            wait_s = remaining if cancel is None else min(remaining, CANCEL_POLL_S)
            try:
                payload = result.get(timeout=wait_s, interval=self._poll_s, propagate=True)
            except CeleryTimeoutError:
                continue
            except NodeFailed as exc:
                return self._parse(exc.wire, call)
            except TaskRevokedError:
                if cancel is not None and cancel.cancelled:
                    return call.cancelled()
                return call.timed_out("the call expired")
            except OperationalError as exc:  # kombu's connection errors
                return self._unreachable(call, exc)
            except Exception as exc:
                if lost_connection(exc):
                    return call.failed(ErrorCode.FLEET_UNAVAILABLE, LOST_CONNECTION)
                log.error("node task %s failed without a NodeResult (%s)", call.node,
                          type(exc).__name__)  # fmt: skip
                return call.failed(ErrorCode.MEMORY_BACKEND_ERROR, "the node task failed")
            return self._parse(payload, call)
