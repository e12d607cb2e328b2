# prefill lab in a container: the patched llama.cpp engine, the cb_eval instrument and the tiny model are
# built into the image; `lab` is the entrypoint. Usage, options and caveats: docs/container.md.
#
# Needs BuildKit (RUN --mount): `docker compose build`, `docker buildx build`, or `docker build` of Docker 23+.
# There is deliberately no `# syntax=` line: the daemon's built-in Dockerfile frontend is used, so nothing but
# the base image comes from a registry.

# Debian 12 (bookworm) slim, pinned by digest. Hosts without Docker Hub pass their own bookworm image, e.g.
# --build-arg BASE_IMAGE=lab-base:bookworm (debootstrap + docker import: scripts/docker-private.sh base-image).
ARG BASE_IMAGE=debian:bookworm-slim@sha256:3783cc01769c7b2b1b83a5c5ad96c815348e28ed7da68e2e3687004faa906251
FROM ${BASE_IMAGE}

SHELL ["/bin/bash", "-o", "pipefail", "-c"]

# 1. scripts/system-deps.sh minus the test-only packages (sshd, chromium); procps for `free` in the host snapshot.
# Any uid may run the image (compose.yaml maps the host user), so git must accept repositories owned by root.
# DL3008 (pin apt versions): the digest pins the Debian release; pinning package versions as well breaks the
# build whenever a point release or security update replaces them in the archive.
# hadolint ignore=DL3008
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      ca-certificates ccache cmake g++ git libssl-dev make procps python3 python3-venv \
 && rm -rf /var/lib/apt/lists/* \
 && git config --system --add safe.directory '*'

# 2. Extra CA certificates (a TLS-intercepting proxy, a corporate CA): `*.crt` files in extra-ca/ of the build
# context, or a build secret `extra_ca` (one PEM file). CA certificates are public; they stay trusted in the image.
COPY extra-ca/ /usr/local/share/ca-certificates/extra/
RUN --mount=type=secret,id=extra_ca,required=false \
    if [[ -s /run/secrets/extra_ca ]]; then \
      cp /run/secrets/extra_ca /usr/local/share/ca-certificates/extra/build-secret.crt; \
    fi \
 && update-ca-certificates

RUN useradd --create-home --uid 1000 --shell /bin/bash lab && chmod 1777 /home/lab

# The lab's cache (engine sources and builds, models, instrument) lives in the image. The lab is installed
# non-editable, so patches/ is found through LAB_ENGINE__PATCHES_DIR.
ENV VIRTUAL_ENV=/opt/prefill-lab/venv \
    PATH=/opt/prefill-lab/venv/bin:$PATH \
    LAB_CACHE_DIR=/opt/prefill-lab/cache \
    LAB_ENGINE__PATCHES_DIR=/opt/prefill-lab/src/patches/llama.cpp \
    PIP_CERT=/etc/ssl/certs/ca-certificates.crt \
    PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /opt/prefill-lab/src

# Layers go from slow and stable to fast and volatile; each copies only what its step reads, so editing the
# lab's code rebuilds only the last layer (seconds), not the engine. Every step that writes the cache runs
# under `umask 0000` and ends with the find/chmod pair, so whichever uid runs the image can take its locks.

# 3. Python dependencies: the committed lock (runtime only), every file checked against its hash.
COPY pyproject.toml requirements.lock ./
RUN --mount=type=cache,target=/root/.cache/pip \
    python3 -m venv "$VIRTUAL_ENV" \
 && pip install --require-hashes -r requirements.lock

# 4. The engine: sdist (default) = the PyPI llama-cpp-python sdist that vendors llama.cpp (sha256 pinned; the
# release LAB_ENGINE__SDIST_VERSION names: pin or latest); git = clone engine.git_url at engine.git_commit
# (da87e9b). Its patch series applied, CPU build; ccache lives in a
# BuildKit cache mount (this layer rebuilt in 26 s here with a warm ccache, 7 min cold). The sdist archive is
# dropped once extracted (66 MB). LAB_ENGINE__NATIVE=true builds for the build host's CPU (-march=native):
# build the image on the host you measure, or pass false for a portable image.
ARG LAB_ENGINE__SOURCE_MODE=sdist
ARG LAB_ENGINE__SDIST_VERSION=pin
ARG LAB_ENGINE__NATIVE=true
ENV LAB_ENGINE__SOURCE_MODE=${LAB_ENGINE__SOURCE_MODE} \
    LAB_ENGINE__SDIST_VERSION=${LAB_ENGINE__SDIST_VERSION} \
    LAB_ENGINE__NATIVE=${LAB_ENGINE__NATIVE}
COPY patches/ patches/
COPY lab/__init__.py lab/
COPY lab/core/__init__.py lab/core/settings.py lab/core/settings_server.py lab/core/settings_profile.py \
     lab/core/errors.py lab/core/safetar.py lab/core/redact.py lab/core/runs.py lab/core/locks.py lab/core/rawtable.py \
     lab/core/units.py lab/core/hashing.py lab/core/releases.py lab/core/paramsfile.py lab/core/jsonl.py lab/core/
COPY lab/engine/__init__.py lab/engine/source.py lab/engine/series.py lab/engine/build.py lab/engine/pinning.py \
     lab/engine/
RUN --mount=type=cache,target=/var/cache/ccache --mount=type=cache,target=/root/.cache/pip \
    case "$LAB_ENGINE__SOURCE_MODE" in \
      sdist|git) ;; \
      *) echo "LAB_ENGINE__SOURCE_MODE must be sdist or git, got '$LAB_ENGINE__SOURCE_MODE'" >&2; exit 2 ;; \
    esac \
 && umask 0000 \
 && CCACHE_DIR=/var/cache/ccache python -c 'if 1: \
      from lab.core.settings import load_settings; from lab.engine.build import build_engine; \
      s = load_settings(); print(build_engine(s.engine, s.cache_dir, quiet=True).server)' \
 && rm -rf "$LAB_CACHE_DIR/downloads" \
 && find "$LAB_CACHE_DIR" -type d ! -perm -0777 -exec chmod 0777 {} + \
 && find "$LAB_CACHE_DIR" -type f ! -perm -0444 -exec chmod a+r {} +

# 5. The tiny model and its vision projector (deterministic; keyed by the writers' sources).
COPY lab/core/gguf_io.py lab/core/
COPY lab/models/__init__.py lab/models/resolve.py lab/models/
COPY lab/models/tiny/ lab/models/tiny/
RUN umask 0000 \
 && python -c 'if 1: \
      from lab.core.settings import load_settings; from lab.engine.source import prepare_source; \
      from lab.models.resolve import ensure_tiny_model, ensure_tiny_projector; \
      s = load_settings(); src = prepare_source(s.engine, s.cache_dir); \
      print(ensure_tiny_model(s.cache_dir, src)); print(ensure_tiny_projector(s.cache_dir, src))' \
 && find "$LAB_CACHE_DIR" -type d ! -perm -0777 -exec chmod 0777 {} + \
 && find "$LAB_CACHE_DIR" -type f ! -perm -0444 -exec chmod a+r {} +

# 6. The compiled tools, linked against the engine: the cb_eval instrument (lab profile) and the in-process
# arms driver (lab arms), with the header they share (lab/native/labtool.h, also in their build key).
COPY lab/native/ lab/native/
COPY lab/instrument/ lab/instrument/
COPY lab/inproc/ lab/inproc/
RUN umask 0000 \
 && python -c 'if 1: \
      from lab.core.settings import load_settings; from lab.engine.build import build_engine; \
      from lab.instrument import build_instrument; from lab.inproc import build_driver; \
      s = load_settings(); e = build_engine(s.engine, s.cache_dir); \
      print(build_instrument(e, s.cache_dir).binary, build_driver(e, s.cache_dir).binary)' \
 && find "$LAB_CACHE_DIR" -type d ! -perm -0777 -exec chmod 0777 {} + \
 && find "$LAB_CACHE_DIR" -type f ! -perm -0444 -exec chmod a+r {} +

# 7. The lab itself (non-editable) and the same three steps through its CLI, now with params.yaml: no-ops
# when the layers above match it (a params.yaml with other engine settings builds here instead).
COPY lab/ lab/
COPY params.yaml /work/params.yaml
WORKDIR /work
RUN --mount=type=cache,target=/var/cache/ccache --mount=type=cache,target=/root/.cache/pip \
    umask 0000 \
 && pip install --no-deps /opt/prefill-lab/src \
 && rm -rf /opt/prefill-lab/src/build /opt/prefill-lab/src/*.egg-info \
 && CCACHE_DIR=/var/cache/ccache lab engine build --quiet \
 && lab model tiny --vision \
 && python -c 'if 1: \
      from lab.core.settings import load_settings; from lab.engine.build import build_engine; \
      from lab.instrument import build_instrument; from lab.inproc import build_driver; \
      s = load_settings(); e = build_engine(s.engine, s.cache_dir); \
      print(build_instrument(e, s.cache_dir).binary, build_driver(e, s.cache_dir).binary)' \
 && find "$LAB_CACHE_DIR" -type d ! -perm -0777 -exec chmod 0777 {} + \
 && find "$LAB_CACHE_DIR" -type f ! -perm -0444 -exec chmod a+r {} + \
 && install -d -m 1777 /work /work/catalog /work/catalog/runs /work/reports /work/models

ENV HOME=/home/lab
# lab; compose.yaml runs the image as the host user instead
USER 1000:1000
ENTRYPOINT ["lab"]
CMD ["--help"]

# Last, so a new commit only relabels the image. The lab is installed from a copy, not a checkout, so a run's
# git/commit.txt says "unknown (not a git checkout)": this label (and LAB_REVISION) names the commit.
ARG LAB_REVISION=unknown
ENV LAB_REVISION=${LAB_REVISION}
LABEL org.opencontainers.image.title="prefill lab" \
      org.opencontainers.image.revision="${LAB_REVISION}"
