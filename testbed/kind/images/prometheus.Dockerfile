# The e2e suite's Prometheus (tests/e2e/test_monitoring.py): Debian bookworm's prometheus package, so
# no registry is needed. BASE is debian:bookworm-slim where a registry serves it, else the base
# scripts/kind/images.sh makes offline with mmdebstrap.
ARG BASE=debian:bookworm-slim
FROM ${BASE}
LABEL dev.dm.purpose="dm e2e: Prometheus"
RUN apt-get update -qq \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null \
    && apt-get clean && rm -rf /var/lib/apt/lists/* /var/cache/apt/archives/*.deb \
    && mkdir -p /prometheus && chown 10001:10001 /prometheus
USER 10001:10001
WORKDIR /prometheus
ENTRYPOINT ["/usr/bin/prometheus"]
CMD ["--config.file=/etc/prometheus/prometheus.yml", "--storage.tsdb.path=/prometheus"]
