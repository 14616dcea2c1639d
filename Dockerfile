# syntax=docker/dockerfile:1
# genworker API tier (CPU): `genworker api` over the shared Redis and S3-compatible store. No model runs
# here; N replicas behind a load balancer, each stateless (keys and rate limits live in Redis).
#
# Build:  docker build -t genworker-api .
# Run:    docker run -p 8000:8000 -e GENWORKER_QUEUE__BACKEND=redis \
#           -e GENWORKER_QUEUE__REDIS_URL=redis://redis:6379/0 -e GENWORKER_STORE__BACKEND=s3 ... genworker-api
# Create a key:  docker run --rm -e ... genworker-api keys create --project acme --scope generations:write --scope generations:read
FROM python:3.11-slim-bookworm

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    HF_HUB_OFFLINE=1 \
    GENWORKER_DATA_DIR=/var/lib/genworker \
    GENWORKER_API__HOST=0.0.0.0 \
    GENWORKER_API__PORT=8000

SHELL ["/bin/bash", "-o", "pipefail", "-c"]

RUN pip install --upgrade "pip>=25"

# The API tier: the server distribution without its `worker` extra (no torch, diffusers, transformers,
# accelerate, imageio-ffmpeg) plus the client distribution its `genworker client` commands use, each shared
# dependency at the version of the worker's lock (requirements/worker.lock, the versions the tests ran with).
# The catalog ships inside the wheel; the build reads it, as GET /v1/models does.
WORKDIR /app
COPY requirements/worker.lock ./requirements/worker.lock
COPY pyproject.toml README.md ./
COPY foundation ./foundation
COPY genworker ./genworker
COPY worker ./worker
COPY pipelines ./pipelines
COPY api ./api
COPY client ./client
COPY configs ./configs
COPY scripts ./scripts
RUN pip install -c requirements/worker.lock /app/client /app && pip check && genworker version \
 && genworker catalog > /dev/null \
 && python -c "import importlib.util as u, sys; sys.exit(any(u.find_spec(m) for m in ('torch', 'diffusers', 'transformers')))"

RUN useradd --create-home --uid 10001 genworker \
 && mkdir -p /var/lib/genworker && chown genworker:genworker /var/lib/genworker
USER 10001:10001
EXPOSE 8000

# /readyz answers 200 only while the queue (Redis) and the artifact store answer: a replica that
# cannot reach them is unhealthy. Shell form on purpose: it follows GENWORKER_API__PORT.
# hadolint ignore=DL3025
HEALTHCHECK --interval=15s --timeout=5s --start-period=30s --retries=3 \
  CMD python -c "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/readyz' % os.environ['GENWORKER_API__PORT'], timeout=4)" || exit 1

# uvicorn finishes in-flight requests on SIGTERM; every request is short (create, get, list).
ENTRYPOINT ["genworker"]
CMD ["api"]
