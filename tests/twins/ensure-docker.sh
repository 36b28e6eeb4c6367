#!/usr/bin/env bash
# Make sure what the Spark twins need is here: a Docker engine that answers, debootstrap
# (for the twin base image), iproute2 and nsenter (for the QSFP cable), and root.
# As root on Debian or Ubuntu it installs and starts what is missing; elsewhere it says
# exactly what to install.
set -euo pipefail

missing=()
command -v dockerd >/dev/null 2>&1 || missing+=(docker.io)
command -v debootstrap >/dev/null 2>&1 || missing+=(debootstrap)
command -v ip >/dev/null 2>&1 || missing+=(iproute2)
command -v nsenter >/dev/null 2>&1 || missing+=(util-linux)

if [ ${#missing[@]} -eq 0 ] && docker info >/dev/null 2>&1 && [ "$(id -u)" -eq 0 ]; then
  exit 0
fi

if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "Spark twins need, as root: a running Docker engine, debootstrap, iproute2, nsenter." >&2
  [ ${#missing[@]} -gt 0 ] && echo "Missing packages: ${missing[*]}" >&2
  echo "On Debian/Ubuntu: sudo apt-get install docker.io debootstrap iproute2 util-linux," >&2
  echo "then run this command again with sudo (twins create veth links and a base image)." >&2
  exit 1
fi

# One engine for the whole machine: checkouts that get here at once take turns (apt's lock,
# one dockerd and its log); after its wait, a checkout finds the engine another one started.
exec 9>>/tmp/sparkdeploy-docker.lock
if command -v flock >/dev/null 2>&1; then flock 9; fi  # util-linux, unless it is missing

if [ ${#missing[@]} -gt 0 ]; then
  echo "twins: installing ${missing[*]}" >&2
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    "${missing[@]}" >/dev/null
fi

if ! docker info >/dev/null 2>&1; then
  if [ -d /run/systemd/system ]; then
    systemctl start docker >/dev/null 2>&1 || true
  fi
fi
if ! docker info >/dev/null 2>&1; then
  echo "twins: starting dockerd (log: /var/log/sparkdeploy-dockerd.log)" >&2
  nohup dockerd >/var/log/sparkdeploy-dockerd.log 2>&1 9>&- &  # the engine must not keep the lock
  for _ in $(seq 1 60); do
    docker info >/dev/null 2>&1 && break
    sleep 1
  done
fi
if ! docker info >/dev/null 2>&1; then
  echo "twins: the Docker engine did not answer within 60s; see /var/log/sparkdeploy-dockerd.log" >&2
  exit 1
fi
