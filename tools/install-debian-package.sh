#!/usr/bin/env bash
# install-debian-package.sh PACKAGE WHAT: install Debian's PACKAGE (for WHAT, said while installing) where this
# system can (apt-get, as root or with password-less sudo); exit status 1, saying nothing, where it cannot.
# Used by tools/ensure-chromium.sh and tools/ensure-bubblewrap.sh.
set -euo pipefail
package="$1"
what="$2"
command -v apt-get >/dev/null 2>&1 || exit 1
if [ "$(id -u)" = 0 ]; then
  sudo=""
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
  sudo="sudo -n"
else
  exit 1
fi
echo "Installing $package (Debian package) for $what..."
DEBIAN_FRONTEND=noninteractive $sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "$package" >/dev/null
