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
if bash "$(dirname "$0")/install-debian-package.sh" chromium "the rendered-page checks"; then
  exit 0
fi
echo "The rendered-page checks need headless Chromium, and this script cannot install it here." >&2
echo "Install it and run make test again:  sudo apt-get install chromium   (Debian/Ubuntu)" >&2
echo "or point CHROMIUM at a Chrome or Chromium executable:  CHROMIUM=/path/to/chrome make test" >&2
exit 1
