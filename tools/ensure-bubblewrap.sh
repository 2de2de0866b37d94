#!/usr/bin/env bash
# Make sure bubblewrap (`bwrap`, Debian's package `bubblewrap`) is available: the grader runs every answer in a
# sandbox of the kernel's with it, and refuses to grade without one (unless told --no-isolation).
# `make test` runs this as one of its first stages (and `make bubblewrap` on its own):
# - nothing to do when `bwrap` is already there;
# - installs Debian's package where it can (as root, or with password-less sudo, on a system with apt-get);
# - otherwise stops at once, saying what to run.
set -euo pipefail
if command -v bwrap >/dev/null 2>&1; then
  exit 0
fi
if bash "$(dirname "$0")/install-debian-package.sh" bubblewrap "the grader's sandbox"; then
  exit 0
fi
echo "The grader's sandbox needs bubblewrap (bwrap), and this script cannot install it here." >&2
echo "Install it and run make test again:  sudo apt-get install bubblewrap   (Debian/Ubuntu; dnf install bubblewrap on Fedora)" >&2
exit 1
