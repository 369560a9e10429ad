"""Musings are not preferences: considering, wishing, hedging, holding off (issue 35).

The memory-capabilities seed admits "only explicitly approved durable communication
preferences". A user turn that only *wondered* about a language ("I've been wondering
whether German might suit my updates better. I'm not sure, so please don't change
anything yet.") was admitted with the offline model in two runs of two: the model
proposed it, and no rule of :mod:`.durability` said no. Two rules, in en, zh, de, fr, es
and ja, decide it in code whatever the model proposes:

* :func:`is_tentative` — the sentence only considers, wishes, muses or hedges ("it might
  be nice to…", "perhaps one day…", "I'm not sure I'd want…", "vielleicht", "也许",
  "peut-être", "quizás", "かもしれません"): reason ``not_durable_tentative``;
* :func:`holds_off` — the user asks for no change ("don't change anything yet", "lass
  alles so", "先别动", "ne change rien", "no cambies nada", "まだ変えないでください") in the
  turn of the quote or a later user turn: reason ``not_durable_on_hold``.

Like the other rules the lists are conservative the safe way: a sentence that both
decides and hedges ("Maybe always reply in German") is rejected; a later, plain
statement ("Yes. From now on, write in German.") is admitted on its own.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from ditto_worker.memory_tasks.phrases import phrase_pattern

__all__ = ["holds_off", "is_tentative", "on_hold"]

# fmt: off
_TENTATIVE = phrase_pattern(
    [
        # English: hedges, musing, considering, wishing, undecided, some day
        "maybe", "perhaps", "possibly", "probably", "might", "may be", "could be", "would be",
        "would read", "would suit", "would work", "would look", "I guess", "I suppose",
        "wonder*", "not sure", "unsure", "not certain", "not convinced", "I doubt",
        "consider*", "thinking about", "thinking of", "I'm thinking", "I've been thinking",
        "toying with", "on the fence", "undecided", "not decided", "haven't decided",
        "haven't made up my mind", "can't decide", "not yet", "one day", "someday", "some day",
        "eventually", "at some point", "I wish", "ponder*", "mulling", "debating",
        "contemplat*", "tempted", "part of me", "back and forth", "kind of", "sort of",
        # German
        "vielleicht", "eventuell", "möglicherweise", "womöglich", "wahrscheinlich",
        "überlege*", "frage mich", "fragen uns", "nicht sicher", "unsicher", "weiß nicht",
        "noch nicht", "irgendwann", "eines Tages", "wäre", "wären", "könnte", "könnten",
        "mit dem Gedanken", "mal sehen", "schwanke", "wünschte", "unschlüssig",
        # French
        "peut-être", "peut être", "je me demande", "me demande", "hésite", "j'hésite",
        "pas sûr", "pas sûre", "pas certain", "pas certaine", "un jour", "ce serait",
        "serait", "seraient", "pourrait", "pourraient", "réfléchis", "je réfléchis",
        "envisag*", "pas encore", "éventuellement", "probablement", "sans doute", "songe*",
        # Spanish
        "quizás", "quizá", "tal vez", "a lo mejor", "me pregunto", "no estoy seguro",
        "no estoy segura", "algún día", "estaría", "sería", "serían", "podría", "podrían",
        "quedaría", "pensando en", "estoy pensando", "todavía no", "aún no", "consideran*",
        "no sé si", "probablemente", "dudo",
    ]
)
# fmt: on
_TENTATIVE_CJK = re.compile(
    "也许|或许|(?<!尽)可能|大概|说不定|考虑|在想|想想|琢磨|不确定|没想好|还没决定|没决定|"
    "拿定主意|犹豫|纠结|有一天|哪天|就好了|有点想|不知道|"
    "かもしれ|かも|かな|たぶん|多分|検討|考えて|考え中|迷って|迷い|悩んで|いつか|"
    "わからない|分からない|いいな|たらいい|ればいい"
)
"""Chinese and Japanese hedges (substrings; 尽可能 "as … as possible" is not one)."""

# fmt: off
_HOLD = phrase_pattern(
    [
        # English
        "don't change anything", "do not change anything", "don't change it",
        "don't change that", "nothing to change", "no changes", "no change",
        "leave things as they are", "leave it as it is", "leave everything as",
        "keep things as they are", "keep everything as it is", "hold off",
        # German
        "nichts ändern", "noch nichts", "lass alles so", "lass es so", "alles so, wie",
        "erst mal nicht", "belass*",
        # French
        "ne change rien", "ne changez rien", "rien changer", "laisse comme", "laisse tout",
        # Spanish
        "no cambies nada", "no cambie nada", "no cambiar nada", "déjalo como", "deja todo como",
        "sin cambios",
    ]
)
# fmt: on
_HOLD_CJK = re.compile(
    "先别动|先不要改|先别改|不要改|别改|先不用改|保持原样|维持原样|暂时不要|目前保持|"
    "変えないで|変更しないで|そのままで|現状のまま"
)


def is_tentative(sentence: str) -> bool:
    """True when ``sentence`` only considers, wishes, muses or hedges (see the module).

    Args:
        sentence: a whole user sentence (the candidate a quote lies in).
    """
    return bool(_TENTATIVE.search(sentence) or _TENTATIVE_CJK.search(sentence))


def holds_off(text: str) -> bool:
    """True when ``text`` (a user turn) asks that nothing be changed (see the module)."""
    return bool(_HOLD.search(text) or _HOLD_CJK.search(text))


def on_hold(quote: str, user_turns: Sequence[str]) -> bool:
    """True when the first user turn holding ``quote``, or a later user turn, asks that
    nothing be changed (:func:`holds_off`): reason ``not_durable_on_hold``.

    Args:
        quote: the proposal's quote.
        user_turns: the contents of the conversation's user turns, in order.
    """
    first = next((i for i, text in enumerate(user_turns) if quote and quote in text), None)
    return first is not None and any(holds_off(text) for text in user_turns[first:])
