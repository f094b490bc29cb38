#!/bin/sh
# Install hamimig with its `kube` extra from a checkout into a new virtual environment.
#
#   sh scripts/install-venv.sh PREFIX [CHECKOUT]     (CHECKOUT: the current directory if left out)
#
# The Containerfile's build stage runs exactly this, then copies PREFIX alone into the final
# stage; tests/test_image.py runs it too, into an empty directory, from a copy of what the
# Containerfile copies. The environment gets no pip, setuptools or wheel of its own: the
# running Python's pip (22.3 or later: `pip --python`) installs into it, and the build backend
# lives only in pip's temporary build environment. So nothing that builds ends up in PREFIX.
# PYTHON names the interpreter (default python3); PREFIX must not exist yet.
set -eu

if [ $# -lt 1 ] || [ $# -gt 2 ]; then
  echo "usage: sh $0 PREFIX [CHECKOUT]" >&2
  exit 2
fi
prefix=$1
# An absolute path, so that pip reads `CHECKOUT[kube]` as a directory, never as a package name.
checkout=$(cd "${2:-.}" && pwd)
python=${PYTHON:-python3}

if [ -e "$prefix" ]; then
  echo "$0: $prefix exists; give a new directory" >&2
  exit 2
fi
"$python" -m venv --without-pip "$prefix"
"$python" -m pip --python "$prefix/bin/python" install --no-cache-dir "$checkout[kube]"
# The installed command works (its imports resolve) before anything ships it.
"$prefix/bin/hamimig" --version
