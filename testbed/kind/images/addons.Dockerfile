# The add-ons of dm's offline kind node image (testbed/dm_testbed/addons): the cluster DNS that
# stands in for CoreDNS and the per-node networking and volume provisioner. Built FROM the Python
# base the dm image builds from, with the two libraries they use.
ARG BASE=python:3.11.11-slim-bookworm
FROM ${BASE}
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PYTHONPATH=/opt/addons PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python3 -m venv /opt/venv && /opt/venv/bin/pip install --quiet "aiohttp>=3.10,<4" "dnslib>=0.9.24,<1"
ENV PATH=/opt/venv/bin:$PATH
COPY dm_testbed /opt/addons/dm_testbed
# kubeadm's coredns Deployment gives only CoreDNS's arguments (-conf /etc/coredns/Corefile).
ENTRYPOINT ["python3", "-m", "dm_testbed.addons.dns"]
