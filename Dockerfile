# The ditto-worker image: the package with the extras in EXTRAS (default: ops = Flower,
# honcho; postgres, qdrant, milvus, mysql = the PostgreSQL, Qdrant, Milvus and MySQL stores'
# clients; gateway = the
# HTTP gateway), the reference ditto.yaml and the LoCoMo sample data. compose.yaml builds it as ditto-worker:0.1.0 (and with
# EXTRAS=ops,postgres,qdrant,milvus,mysql,gateway,infer as ditto-worker-infer:0.1.0) and runs each
# Procfile process from it (`ditto-worker worker --nodes reads`, `ditto-worker flower`,
# ...). Workers keep the SQLite store in /data (a volume in compose.yaml).
# Dependencies are installed from pyproject.toml alone, before the source is copied, so a
# change to the code rebuilds only the last layers.
FROM python:3.11.14-slim-bookworm@sha256:65a93d69fa75478d554f4ad27c85c1e69fa184956261b4301ebaf6dbb0a3543d

ARG EXTRAS=ops,postgres,qdrant,milvus,mysql,gateway
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    DITTO_WORKER_MEMORY_SQLITE_PATH=/data/memory.sqlite

WORKDIR /app
COPY pyproject.toml constraints.txt scripts/requirements.py ./
# The requirements of the package and of EXTRAS, from pyproject.toml: this layer changes
# only when the dependencies do; constraints.txt holds the exact versions the tests passed
# with (scripts/constraints.sh).
RUN python requirements.py "$EXTRAS" > /tmp/requirements.txt \
    && pip install -c constraints.txt -r /tmp/requirements.txt
COPY README.md ditto.yaml ./
COPY ditto_worker ./ditto_worker
COPY plugins ./plugins
COPY data ./data
# Editable, so `ditto-worker demo` finds data/ beside the package; no dependency is
# resolved again (--no-deps).
RUN pip install --no-deps -e . \
    && useradd --system --uid 10001 --home-dir /app --shell /usr/sbin/nologin ditto \
    && mkdir -p /data \
    && chown ditto /data

USER ditto
STOPSIGNAL SIGTERM
CMD ["ditto-worker", "--help"]
