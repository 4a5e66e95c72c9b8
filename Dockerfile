# queuebot: one image for every command (serve by default; console, db upgrade, audit
# verify, config check ... as arguments).
#
# BASE is any Debian-like image with Python 3.11 and its venv module: python:3.11-slim by
# default, or the Debian bookworm base scripts/image.sh makes with debootstrap (python3 and
# python3-venv, no pip). Either way queuebot goes into a venv, /opt/queuebot.
ARG BASE=python:3.11-slim

FROM ${BASE} AS build
ENV PYTHONDONTWRITEBYTECODE=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
# wheelhouse/ (queuebot and all its dependencies as wheels, made by scripts/image.sh) when
# the context holds one. "wheelhous[e]" is a pattern: a pattern that matches nothing copies
# nothing instead of failing, with the classic builder and BuildKit alike, as long as the
# instruction copies something (pyproject.toml). Its wheels land in /src/wheelhouse/.
COPY pyproject.toml wheelhous[e] /src/wheelhouse/
COPY pyproject.toml README.md /src/
COPY bot /src/bot
COPY commands /src/commands
COPY services /src/services
# With wheels: from them only (the build may have no network). Without: from the sources,
# fetching the dependencies from the package index. pip and setuptools leave the venv
# after: nothing installs into it at run time.
RUN set -eu; \
    python3 -m venv /opt/queuebot; \
    if ls /src/wheelhouse/*.whl >/dev/null 2>&1; then \
      /opt/queuebot/bin/pip install --no-index --find-links /src/wheelhouse queuebot; \
    else \
      /opt/queuebot/bin/pip install /src; \
    fi; \
    /opt/queuebot/bin/pip uninstall -y setuptools pip; \
    /opt/queuebot/bin/queuebot --version

FROM ${BASE}
# No bytecode written at run time (the root filesystem may be read-only; pip compiled the
# venv's at build time), output unbuffered for the container's log.
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 LANG=C.UTF-8 \
    PATH=/opt/queuebot/bin:$PATH HOME=/data
# No setuid or setgid program is left (su, passwd, mount, chsh ...): nothing in the image
# can raise a process's privileges, even where no-new-privileges is not set.
RUN set -eu; \
    groupadd --system --gid 10001 queuebot; \
    useradd --system --uid 10001 --gid 10001 --home-dir /data --no-create-home \
      --shell /usr/sbin/nologin queuebot; \
    mkdir -p /data; \
    chown 10001:10001 /data; \
    find / -xdev -perm /6000 -type f -exec chmod a-s {} +
COPY --from=build /opt/queuebot /opt/queuebot

# Everything queuebot writes is under /data (its working directory, so the default SQLite
# database ./queuebot.db lands there) or /tmp: the root filesystem may be mounted read-only
# (docker run --read-only --tmpfs /tmp). Configuration: mount a TOML file and set
# QUEUEBOT_CONFIG (or mount it as /data/queuebot.toml); secrets and database URLs come from
# the environment or from files it names (QUEUEBOT_DATABASE_URL_FILE=/run/secrets/...,
# SLACK_BOT_TOKEN_FILE, ...: docs/operations.md), never from the image. Only queuebot's
# own packages are installed: no tests and no test kit.
VOLUME /data
WORKDIR /data
USER 10001:10001
EXPOSE 8080
# Liveness: GET /healthz on the port serve listens on (read from its command line, so
# `serve --port 9000` is probed on 9000), with the venv's Python: the image has no curl.
HEALTHCHECK --interval=30s --timeout=5s --start-period=30s --retries=3 \
    CMD ["/opt/queuebot/bin/python", "-P", "-m", "bot.healthcheck"]
ENTRYPOINT ["queuebot"]
CMD ["serve", "--host", "0.0.0.0", "--port", "8080"]
