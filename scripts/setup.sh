#!/usr/bin/env bash
# The first README command: installs every dependency (Debian packages; runsc from
# bookworm-backports), builds b3os, builds the `base` template if it is not cached, and
# starts b3osd on 127.0.0.1:7070.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
./scripts/build.sh
./templates/base/build.sh /var/lib/b3os/templates/base
./scripts/start.sh
