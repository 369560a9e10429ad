"""Turns of a conversation and the candidate sentences code offers the model (issue 25).

The ``write`` and ``update`` tasks never let the model invent a quote: code cuts the
user's own turns into sentences (:func:`candidate_sentences`) and the model may only pick
one of them by index (``proposal_schema`` in :mod:`ditto_worker.memory_tasks.policy`
limits the quote to these texts). System, assistant and tool turns give no candidates
even when they state a preference (mem0ai/mem0#2736: a memory layer saved part of its
own system prompt as a user memory).

Splitting rules (pure, no model, no locale data):

* Chinese and Japanese full-width terminators ``。！？`` (and ``!?`` after CJK text) end a
  sentence with no space after them; closing brackets/quotes stay with the sentence.
* Latin scripts (English, German, French, Spanish, …): ``.``, ``!``, ``?``, ``…`` followed
  by whitespace or the end of the text, except after a known abbreviation (``e.g.``,
  ``z.B.``, ``Mr.``, ``usw.``, ``etc.`` before a lower-case word …), a single letter
  (an initial) or a German ordinal (``am 3. Mai``).
* Line breaks always end a sentence (bullet lists, one request per line).

Every candidate's ``text`` is a verbatim substring of its turn's ``content`` (only
surrounding whitespace is trimmed), so a quote equal to a candidate is verbatim too.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

__all__ = [
    "ROLES",
    "Candidate",
    "InvalidTurnError",
    "Turn",
    "candidate_sentences",
    "sentence_spans",
    "turns_from_messages",
]

ROLES = ("user", "assistant", "system", "tool")
"""The roles a :class:`Turn` may have (OpenAI chat roles; ``tool`` for tool results)."""


class InvalidTurnError(ValueError):
    """A message is not a ``{role, content}`` turn; ``field`` names the offending key.

    The tasks map it to ``INVALID_INPUT`` naming ``field`` (e.g. ``messages[2].role``).
    """

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


@dataclass(frozen=True, slots=True)
class Turn:
    """One message of a conversation.

    Attributes:
        role: one of :data:`ROLES`; only ``user`` turns can ground a preference.
        content: the message text, as the user (or assistant, system, tool) wrote it.
    """

    role: str
    content: str

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise InvalidTurnError("role", f"must be one of {', '.join(ROLES)}")
        if not isinstance(self.content, str):
            raise InvalidTurnError("content", "must be a string")


@dataclass(frozen=True, slots=True)
class Candidate:
    """A sentence of a user turn that the model may quote.

    Attributes:
        index: position in the list :func:`candidate_sentences` returned (0-based); the
            model names a candidate by this index.
        turn_index: position of the turn in the conversation (0-based, all roles counted).
        text: the sentence, a verbatim substring of ``turns[turn_index].content``.
        start: offset of ``text`` in that content (characters), ``end`` = start + len(text).
    """

    index: int
    turn_index: int
    text: str
    start: int = 0

    @property
    def end(self) -> int:
        """Offset just past the sentence in its turn's content (characters)."""
        return self.start + len(self.text)


def turns_from_messages(messages: Sequence[Mapping[str, object]]) -> list[Turn]:
    """Builds turns from chat messages (``[{role, content}]``, e.g. ``--conversation``).

    Raises:
        InvalidTurnError: a message is not a mapping, or its ``role``/``content`` is
            missing or invalid; ``field`` is ``messages[i].role`` / ``messages[i].content``.
    """
    turns: list[Turn] = []
    for i, message in enumerate(messages):
        if not isinstance(message, Mapping):
            raise InvalidTurnError(f"messages[{i}]", "must be an object {role, content}")
        role, content = message.get("role"), message.get("content")
        if not isinstance(role, str) or role not in ROLES:
            raise InvalidTurnError(f"messages[{i}].role", f"must be one of {', '.join(ROLES)}")
        if not isinstance(content, str):
            raise InvalidTurnError(f"messages[{i}].content", "must be a string")
        turns.append(Turn(role, content))
    return turns


_ABBREVIATIONS = frozenset(
    """e.g i.e etc vs cf mr mrs ms dr prof st no approx ca z.b d.h u.a usw bzw ggf evtl
    vgl inkl sog bspw nr str s.o s.u m.e mme mlle env p.ex cf sr sra srta ud uds p.ej
    aprox""".split()
)
"""Lower-cased tokens before a ``.`` that do not end a sentence (English, German, French,
Spanish). ``etc`` ends one only before an upper-case word."""

_CJK = r"\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uff66-\uff9f"
_BOUNDARY = re.compile(
    rf"""
      [。！？]+[」』”’）)\]]*                   # full-width: no space needed
    | (?<=[{_CJK}])[!?]+[」』”’）)\]]*         # ASCII !? right after CJK text
    | [.!?…]+["'”’»)\]]*(?=\s|$)               # Latin: before whitespace or the end
    | \n+                                      # a line break
    """,
    re.VERBOSE,
)
_TOKEN_BEFORE = re.compile(r"(\S+?)\.+$")
_NEXT_WORD = re.compile(r"\s*(\S)")


def _is_real_stop(content: str, match: re.Match[str]) -> bool:
    """False for a ``.`` after an abbreviation, an initial or a German ordinal."""
    mark = match.group()
    if not mark.startswith(".") or mark.startswith("..."):
        return True
    head = content[max(0, match.start() - 12) : match.start() + 1].split()
    token_match = _TOKEN_BEFORE.search(head[-1]) if head else None
    if token_match is None:
        return True
    token = token_match.group(1).lower().lstrip("(\"'«„“")
    nxt = _NEXT_WORD.match(content, match.end())
    next_lower = nxt is not None and nxt.group(1).islower()
    if token == "etc":
        return not next_lower
    if token in _ABBREVIATIONS:
        return False
    if len(token) == 1 and token.isalpha():
        return False  # an initial: "J. Smith"
    if token.isdigit() and len(token) <= 2 and nxt is not None and nxt.group(1).isalpha():
        return False  # a German ordinal: "am 3. Mai"
    return True


def sentence_spans(content: str) -> Iterator[tuple[int, int]]:
    """Yields ``(start, end)`` character offsets of the sentences of ``content``.

    Each span is trimmed of surrounding whitespace and holds at least one letter or digit;
    ``content[start:end]`` is the sentence, verbatim. Rules: see the module docstring.
    """
    start = 0
    for match in _BOUNDARY.finditer(content):
        if not _is_real_stop(content, match):
            continue
        end = match.end()
        yield from _trimmed(content, start, end)
        start = end
    yield from _trimmed(content, start, len(content))


def _trimmed(content: str, start: int, end: int) -> Iterator[tuple[int, int]]:
    piece = content[start:end]
    stripped = piece.strip()
    if not stripped or not any(ch.isalnum() for ch in stripped):
        return
    offset = start + (len(piece) - len(piece.lstrip()))
    yield offset, offset + len(stripped)


def candidate_sentences(turns: Sequence[Turn]) -> list[Candidate]:
    """The sentences of the user turns, in conversation order.

    Args:
        turns: the conversation; only turns with ``role == "user"`` give candidates.

    Returns:
        ``list[Candidate]``, ``index`` 0..n-1 in order of (turn, offset). Empty when no
        user turn has a sentence.
    """
    candidates: list[Candidate] = []
    for turn_index, turn in enumerate(turns):
        if turn.role != "user":
            continue
        for start, end in sentence_spans(turn.content):
            candidates.append(
                Candidate(len(candidates), turn_index, turn.content[start:end], start)
            )
    return candidates
