"""What code checks of a generated progress message, and the message it builds when a
check fails twice (issue 35 item 5; SPEC.md MEM-TASK-5).

The ``search``, ``write`` and ``update`` tasks ask the model for a project progress
message in the remembered language. The model proposes, code decides:

* :func:`message_problems` — the message never reports a stage done that the request's
  committed facts do not (a clause with a "done" word of the message's language, not
  negated and with no percentage, must name only stages whose status is done; one that
  names the project or "everything" needs every stage done; clauses that name nothing
  known, e.g. a translated stage name, may not outnumber the done stages), and it cites
  no memory the task did not use (``memory <id> v<n>`` with another id or version);
* :func:`fallback_message` — the deterministic message built from the committed facts
  (project, stages and their statuses) in the remembered language, used when a checked
  reply failed twice; the artifact then says ``"generated": false``;
* :func:`citation` — the code-appended citation ``(memory <id> v<version>)`` of every
  memory the message used (never left to the model).

The language check itself stays where it was
(:func:`~ditto_worker.memory_tasks.preferences.progress_message`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

from ditto_worker.memory_tasks.contracts import ProjectStage
from ditto_worker.memory_tasks.phrases import phrase_pattern

__all__ = ["citation", "fallback_message", "message_problems", "stage_is_done"]

# fmt: off
_DONE: Final = phrase_pattern((
    "done", "complete", "completed", "finished", "shipped", "wrapped up",
    "fertig", "fertiggestellt", "abgeschlossen", "erledigt", "beendet", "vollendet",
    "terminé*", "achevé*", "fini", "finie*", "finis", "complété*",
    "terminad*", "completad*", "finalizad*", "acabad*", "concluid*",
    "完成", "完工", "结束", "結束", "完了", "終了", "済み",
))
"""Words that report something done (en, de, fr, es, zh, ja)."""
_NOT: Final = phrase_pattern((
    "not", "n't", "no", "never", "yet", "nicht", "kein*", "noch", "pas", "non", "aucun*",
    "todavía", "aún", "nunca", "未", "没", "沒", "尚", "还", "還", "まだ", "ない", "ません",
))
"""Negations and "not yet" words (a clause with one claims nothing done)."""
# fmt: on
_PERCENT: Final = re.compile(
    r"\d+(?:[.,]\d+)?\s*[%％]|百分之|パーセント"
    r"|\b(?:percent|per cent|prozent|pour cent|por ciento)\b",
    re.IGNORECASE,
)
# fmt: off
_WHOLE: Final = phrase_pattern((
    "project", "everything", "all stages", "Projekt", "alles", "projet", "tout", "toutes",
    "proyecto", "todo", "todas", "项目", "專案", "全部", "所有", "プロジェクト", "すべて", "全て",
))
"""Words that make a done claim about the whole project."""
# fmt: on
_CONTRACTED: Final = re.compile(r"\w+n['’]t(?!\w)", re.IGNORECASE)  # isn't, hasn't
_NOT_AFTER: Final = re.compile(r"^[^\s。、，]{0,4}?(?:ない|ません|なかった)")
"""Japanese negation after the verb (完了していない, 完了していません)."""
_LATIN_WORD: Final = re.compile(r"[^\W\d_]+(?:['’][^\W\d_]+)?")
_NEGATION_WINDOW: Final = 3  # words (or CJK characters + 1) before a done word that negate it
# ":" does not end a clause ("Tests: done." is one claim)
_CLAUSE: Final = re.compile(r"[.;!?,。；！？，、\n]+(?:\s+|$)|\s[-–—]\s|[；。！？，、]")
_CITED: Final = re.compile(r"memory\s+([A-Za-z0-9:_.-]+?)\s*[,(]?\s*v(?:ersion\s*)?(\d+)",
                           re.IGNORECASE)  # fmt: skip

_TEMPLATES: Final = {
    "en": ("Progress report for the project {project}.", 'The stage "{stage}" is finished.',
           'The status of the stage "{stage}" is: {status}.'),
    "de": ("Fortschrittsbericht für das Projekt {project}.",
           "Die Phase „{stage}“ ist abgeschlossen.",
           "Der Stand der Phase „{stage}“ ist: {status}."),
    "fr": ("Point d’avancement du projet {project}.", "L’étape « {stage} » est terminée.",
           "L’étape « {stage} » en est à : {status}."),
    "es": ("Informe de avance del proyecto {project}.", "La etapa «{stage}» está terminada.",
           "La etapa «{stage}» está en: {status}."),
    "zh": ("项目{project}的进展报告。", "阶段「{stage}」已经完成。",
           "阶段「{stage}」的状态是：{status}。"),
    "ja": ("プロジェクト{project}の進捗報告です。", "工程「{stage}」は完了しました。",
           "工程「{stage}」の状況は「{status}」です。"),
}  # fmt: skip
"""Per language: the fallback's opening, its sentence for a done stage and for another
(sentences long enough in the language for the language check to recognise them)."""


def _plain(text: str) -> str:
    return " ".join(re.findall(r"\w+", text.lower()))


def _partial(clause: str) -> bool:
    """A percentage other than 100 in the clause ("60% done", "百分之六十")."""
    for match in _PERCENT.finditer(clause):
        number = re.match(r"\d+(?:[.,]\d+)?", match.group())
        if number is None or float(number.group().replace(",", ".")) != 100:
            return True
    return False


def _negated(clause: str, start: int, end: int) -> bool:
    """Whether the done word at ``clause[start:end]`` is negated: a negation among the few
    words (CJK: characters) just before it, or a Japanese negation just after it. A
    negation elsewhere in the clause ("completed with no failures") does not count."""
    before = clause[:start]
    words = " ".join(w.group() for w in list(_LATIN_WORD.finditer(before))[-_NEGATION_WINDOW:])
    near = before[-(_NEGATION_WINDOW + 1) :]
    if _NOT.search(words) or _CONTRACTED.search(words) or _NOT.search(near):
        return True
    return _NOT_AFTER.search(clause[end:]) is not None


def _claims_done(clause: str) -> bool:
    if _partial(clause):
        return False
    return any(not _negated(clause, m.start(), m.end()) for m in _DONE.finditer(clause))


def stage_is_done(status: str) -> bool:
    """True when a stage's status reports it done: a "done" word not negated, and no
    percentage but 100 (``done``, ``abgeschlossen``, ``100% done``; not ``60% done``,
    ``not done yet``, ``isn't finished``)."""
    return _claims_done(status)


def _names(clause: str, stage: ProjectStage) -> bool:
    name = _plain(stage.name)
    return bool(name) and re.search(rf"(?<!\w){re.escape(name)}(?!\w)", _plain(clause)) is not None


def _done_problems(text: str, project: str, stages: Sequence[ProjectStage]) -> list[str]:
    """Done claims the facts do not back. A claim naming stages is checked against their
    statuses; one naming the project (or "everything") needs every stage done; one naming
    neither (a translated stage name: "la conception est terminée") is allowed as long as
    such claims are no more than the done stages no claim names."""
    problems: list[str] = []
    claims = [c.strip() for c in _CLAUSE.split(text) if c.strip() and _claims_done(c)]
    named_done: set[str] = set()
    unnamed: list[str] = []
    for clause in claims:
        named = [s for s in stages if _names(clause, s)]
        problems += [f"it reports the stage {s.name!r} done; its status is {s.status!r}"
                     for s in named if not stage_is_done(s.status)]  # fmt: skip
        named_done.update(s.name for s in named)
        whole = _WHOLE.search(clause) or _plain(project) in _plain(clause)
        if not named and whole and not all(stage_is_done(s.status) for s in stages):
            problems.append(f"it reports the project done; not every stage is: {clause[:80]!r}")
        elif not named and not whole:
            unnamed.append(clause)
    done_left = [s for s in stages if stage_is_done(s.status) and s.name not in named_done]
    if len(unnamed) > len(done_left):
        problems.append(f"it reports more done than the request: {unnamed[-1][:80]!r}")
    return list(dict.fromkeys(problems))


def _citation_problems(text: str, memories: Iterable[Mapping[str, Any]]) -> list[str]:
    used = {(str(m["id"]), int(m["version"])) for m in memories}
    return [f"it cites memory {ident} v{version}, which this task did not use"
            for ident, version in _CITED.findall(text)
            if (ident, int(version)) not in used]  # fmt: skip


def message_problems(
    text: str,
    project: str,
    stages: Sequence[ProjectStage],
    memories: Iterable[Mapping[str, Any]],
) -> list[str]:
    """What code finds wrong in a generated message (see the module docstring).

    Args:
        text: the model's message, before code appends the citation.
        project: the request's project name.
        stages: the request's project stages (the committed facts).
        memories: the preferences the message applies (``{id, version, …}``).

    Returns:
        One sentence per problem, to be shown to the model when it is asked again; empty
        when the message passes.
    """
    return _done_problems(text, project, stages) + _citation_problems(text, memories)


def fallback_message(project: str, stages: Sequence[ProjectStage], language: str) -> str:
    """The deterministic progress message (see the module docstring): the project, then
    one sentence per stage — done, or its status as the request gives it; English for a
    language with no template."""
    opening, done, other = _TEMPLATES.get(language, _TEMPLATES["en"])
    sentences = [opening.format(project=project)]
    for s in stages:
        template = done if stage_is_done(s.status) else other
        sentences.append(template.format(stage=s.name, status=s.status))
    return ("" if language in ("zh", "ja") else " ").join(sentences)


def citation(memories: Iterable[Mapping[str, Any]]) -> str:
    """``(memory <id> v<version>)`` for every memory, space-separated ("" for none)."""
    return " ".join(f"(memory {m['id']} v{m['version']})" for m in memories)
