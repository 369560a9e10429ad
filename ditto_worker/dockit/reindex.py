"""Re-embedding a document store's collection through an alias (MEM-RET-4).

A document collection fixes its dense vector's name and size when it is created, so a
re-embedding builds the new identity's collection (the *target*) beside the live one,
copies every record into it, and then points the store's collection name at it:

* the target records ``reindexOf`` (the collection it copies) in its metadata; a target
  a killed run made from the same source is kept, any other is dropped
  (:func:`keep_target`);
* the **switch** (:func:`switch`): when the name is an alias already (every collection
  reindexed once) it is moved atomically, a last pass carries over what old-model
  processes wrote just before, and the old collection is dropped; when the name is a
  collection (made before its first reindex), that collection is dropped and the alias
  created right after — two requests, so a run cut between them is finished by the next
  (:func:`finish_cut_switch`).

The store supplies the four requests (:class:`AliasedCollections`); the copy passes are
its own (:func:`ditto_worker.memory.ports.sync_until_settled`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

__all__ = ["AliasedCollections", "finish_cut_switch", "keep_target", "switch"]


class AliasedCollections(Protocol):
    """The collection requests of a store's re-embedding (no call options: an operator's
    command, not a node call)."""

    def exists(self, name: str) -> bool:
        """Whether ``name`` is a collection or an alias."""
        ...

    def recorded(self, name: str) -> Any:
        """The store's record in collection ``name``'s metadata (``None``: none)."""
        ...

    def drop(self, name: str) -> None:
        """Delete collection ``name``."""
        ...

    def alias(self, target: str, name: str, move: bool) -> None:
        """Make ``name`` an alias of ``target``: create it, or (``move``) move it."""
        ...


def _copies(collections: AliasedCollections, target: str, source: str) -> bool:
    recorded = collections.recorded(target)
    return isinstance(recorded, dict) and recorded.get("reindexOf") == source


def finish_cut_switch(collections: AliasedCollections, name: str, target: str) -> bool:
    """Finish a switch a killed run cut between dropping the old collection and creating
    the alias (the name is free and ``target`` records it replaced it).

    Returns:
        True when ``name`` stood for no collection (nothing to copy from).
    """
    if collections.exists(name):
        return False
    if collections.exists(target) and _copies(collections, target, name):
        collections.alias(target, name, move=False)
    return True


def keep_target(collections: AliasedCollections, target: str, source: str) -> bool:
    """Whether ``target`` is a copy of ``source`` a killed run made (kept); any other
    collection of that name is dropped (then the store creates the target)."""
    if not collections.exists(target):
        return False
    if _copies(collections, target, source):
        return True
    collections.drop(target)
    return False


def switch(
    collections: AliasedCollections,
    name: str,
    source: str,
    target: str,
    last_pass: Callable[[], int],
) -> int:
    """Point ``name`` (which stands for ``source``) at ``target`` (module docstring).

    Returns:
        The records embedded by ``last_pass`` (run after an atomic move only).
    """
    if source != name:  # an alias: moved atomically, then a last pass
        collections.alias(target, name, move=True)
        done = last_pass()
        collections.drop(source)
        return done
    collections.drop(source)
    collections.alias(target, name, move=False)
    return 0
