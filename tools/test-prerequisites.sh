#!/usr/bin/env bash
# `npm test`'s pretest step: the suite drives real programs that npm cannot install — Debian's Chromium (browser
# tests), redis-server (cluster tests), nginx with its RTMP module and haproxy (the documented balancer configs,
# the RTMP output). Whatever is missing is installed when this process may (root with apt-get); otherwise the
# step stops with one line naming the packages, so a fresh machine learns what to install instead of seeing
# a test fail deep inside the run. `.ci/run` runs it too, before `npm ci`.
set -euo pipefail

missing=()
have() { command -v "$1" >/dev/null 2>&1 || [ -x "/usr/sbin/$1" ] || [ -x "/usr/bin/$1" ]; }
have chromium || missing+=(chromium)
have redis-server || missing+=(redis-server)
have nginx || missing+=(nginx-light)
# The RTMP module ships as a dynamic nginx module; its package drops a loader into modules-available.
compgen -G '/usr/lib/nginx/modules/ngx_rtmp_module.so' >/dev/null || missing+=(libnginx-mod-rtmp)
have haproxy || missing+=(haproxy)

[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "test prerequisites: installing ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${missing[@]}" >/dev/null
  exit 0
fi

echo "npm test needs these Debian packages: ${missing[*]} — install them (sudo apt-get install ${missing[*]}) and run npm test again" >&2
exit 1
