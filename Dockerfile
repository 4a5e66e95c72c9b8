# queuebot: one image for every command (serve by default; console, db upgrade, audit
# verify, config check ... as arguments).
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1
WORKDIR /app

COPY pyproject.toml README.md ./
COPY bot ./bot
COPY commands ./commands
COPY services ./services
RUN pip install . && useradd --system --uid 10001 --home-dir /data queuebot \
    && mkdir -p /data && chown queuebot /data

USER queuebot
WORKDIR /data
# Configuration: mount a TOML file and set QUEUEBOT_CONFIG; secrets and database URLs come
# from the environment (QUEUEBOT_DATABASE_URL, SLACK_*, DISCORD_*), never from the image.
EXPOSE 8080
ENTRYPOINT ["queuebot"]
CMD ["serve", "--host", "0.0.0.0", "--port", "8080"]
