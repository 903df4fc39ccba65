#!/usr/bin/env bash
# Make sure Debian's Chromium is installed for the browser test; safe to run any number of times.
#
# The browser comes from Debian's "chromium" package (/usr/bin/chromium), never
# from a test tool's own download: the browser test drives it with playwright's
# executable_path. Installs with apt-get (root, or sudo), running
# `apt-get update` first only when the package is not known to apt yet.
set -euo pipefail

say() { printf 'ensure-chromium: %s\n' "$*" >&2; }

if [ -x /usr/bin/chromium ]; then
    exit 0
fi

as_root() {
    if [ "$(id -u)" -eq 0 ]; then "$@"
    elif command -v sudo >/dev/null 2>&1; then sudo "$@"
    else say "need root (or sudo) to run: $*"; exit 1
    fi
}

command -v apt-get >/dev/null 2>&1 || { say "no /usr/bin/chromium and no apt-get: install Chromium as /usr/bin/chromium"; exit 1; }
export DEBIAN_FRONTEND=noninteractive
if ! apt-cache show chromium >/dev/null 2>&1; then
    say "updating the package lists"
    as_root env DEBIAN_FRONTEND=noninteractive apt-get update -q
fi
say "installing Debian's chromium package"
as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends chromium
[ -x /usr/bin/chromium ] || { say "apt-get finished but /usr/bin/chromium is missing"; exit 1; }
say "$(/usr/bin/chromium --version 2>/dev/null || echo chromium) ready"
