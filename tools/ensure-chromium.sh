#!/usr/bin/env bash
# Make sure headless Chromium is available for the rendered-page checks (Debian's package `chromium`).
# `make test` runs this as its first stage (and `make chromium` on its own):
# - nothing to do when Chromium is already there (or CHROMIUM names an executable);
# - installs Debian's package where it can (as root, or with password-less sudo, on a system with apt-get);
# - otherwise stops at once, saying what to run.
set -euo pipefail
if [ -n "${CHROMIUM:-}" ] && command -v "$CHROMIUM" >/dev/null 2>&1; then
  exit 0
fi
if command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1; then
  exit 0
fi
if command -v apt-get >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ]; then
    sudo=""
  elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    sudo="sudo -n"
  else
    sudo="cannot"
  fi
  if [ "$sudo" != cannot ]; then
    echo "Installing chromium (Debian package) for the rendered-page checks..."
    DEBIAN_FRONTEND=noninteractive $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq chromium >/dev/null
    exit 0
  fi
fi
echo "The rendered-page checks need headless Chromium, and this script cannot install it here." >&2
echo "Install it and run make test again:  sudo apt-get install chromium   (Debian/Ubuntu)" >&2
echo "or point CHROMIUM at a Chrome or Chromium executable:  CHROMIUM=/path/to/chrome make test" >&2
exit 1
