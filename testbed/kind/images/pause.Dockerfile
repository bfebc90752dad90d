# The pod sandbox ("pause") image: Debian's catatonit, a static init that in pause mode (-P) does
# what Kubernetes' pause does: hold the pod's namespaces and reap nothing but itself.
ARG BASE=dm.local/debian:bookworm-minbase
FROM ${BASE} AS catatonit
RUN apt-get update -qq \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends catatonit >/dev/null
FROM scratch
COPY --from=catatonit /usr/bin/catatonit /pause
ENTRYPOINT ["/pause", "-P"]
