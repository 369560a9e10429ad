# The ditto-worker image: the package with its ops extras (Flower, honcho), the reference
# ditto.yaml and the LoCoMo sample data. compose.yaml builds it as ditto-worker:0.1.0 and
# runs each Procfile process from it (`ditto-worker worker --nodes reads`, `ditto-worker
# flower`, ...). Workers keep the SQLite store in /data (a volume in compose.yaml).
FROM python:3.11.14-slim-bookworm

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    DITTO_WORKER_MEMORY_SQLITE_PATH=/data/memory.sqlite

WORKDIR /app
COPY pyproject.toml README.md ditto.yaml ./
COPY ditto_worker ./ditto_worker
COPY plugins ./plugins
COPY data ./data
# Editable, so `ditto-worker demo` finds data/ beside the package.
RUN pip install -e ".[ops,qdrant]" \
    && useradd --system --uid 10001 --home-dir /app --shell /usr/sbin/nologin ditto \
    && mkdir -p /data \
    && chown ditto /data

USER ditto
CMD ["ditto-worker", "--help"]
