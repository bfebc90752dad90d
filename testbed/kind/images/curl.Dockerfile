# The e2e suite's HTTP client pods (tests/e2e/test_http.py): curl and jq on Debian bookworm, the way a
# user's pod reaches dm's REST Proxy without a Kafka client. BASE is debian:bookworm-slim where a
# registry serves it, else the base scripts/kind/images.sh makes offline with mmdebstrap.
ARG BASE=debian:bookworm-slim
FROM ${BASE}
LABEL dev.dm.purpose="dm e2e: curl and jq"
RUN apt-get update -qq \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
       curl jq ca-certificates coreutils >/dev/null \
    && rm -rf /var/lib/apt/lists/*
USER 10001:10001
