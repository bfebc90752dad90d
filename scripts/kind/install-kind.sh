#!/usr/bin/env bash
# kind, into the tool cache: the one on PATH if there is one (a hosted CI runner installs its own), else
# Debian trixie's kind package (0.27), fetched from the Debian mirror through a private apt
# configuration and unpacked (it runs on bookworm: a static Go binary). Later runs find it at once.
#   DM_TESTBED_CACHE  cache root (default ${XDG_CACHE_HOME:-~/.cache}/dm-testbed)
set -euo pipefail
cache=${DM_TESTBED_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/dm-testbed}
bin=$cache/kubernetes-v1.20.2/bin
[ -x "$bin/kind" ] && exit 0
if command -v kind >/dev/null; then
  echo "install-kind: using $(command -v kind) ($(kind version))"
  exit 0
fi
mirror=http://deb.debian.org/debian
[ -f /etc/apt/sources.list.d/debian.sources ] && \
  mirror=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/sources" "$work/lists/partial" "$work/archives/partial" "$bin"
printf 'Types: deb\nURIs: %s\nSuites: trixie\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
  "$mirror" >"$work/sources/trixie.sources"
opts=(-o Dir::Etc::sourcelist=/dev/null -o "Dir::Etc::sourceparts=$work/sources" -o "Dir::State::Lists=$work/lists"
      -o "Dir::Cache::archives=$work/archives" -o Dir::State::status=/dev/null -o APT::Get::List-Cleanup=0)
[ "$(id -u)" = 0 ] && opts+=(-o APT::Sandbox::User=root)
echo "install-kind: fetching Debian trixie's kind package"
apt-get "${opts[@]}" update -qq >/dev/null
(cd "$work" && apt-get "${opts[@]}" download -qq kind >/dev/null)
dpkg-deb -x "$work"/kind_*.deb "$work/x"
install -m 0755 "$work/x/usr/bin/kind" "$bin/kind"
echo "install-kind: $("$bin/kind" version) in $bin"
