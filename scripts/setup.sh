#!/usr/bin/env bash
# The first README command: installs every dependency (Debian packages; runsc from
# bookworm-backports), builds b3os, builds the `base` template if it is not cached, and
# starts b3osd on 127.0.0.1:7070: as the systemd service b3osd.service where systemd runs
# (scripts/start-service.sh: the unit of packaging/ on this build tree), else in the
# background (scripts/start.sh: containers, machines without systemd).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
./scripts/build.sh
./templates/base/build.sh /var/lib/b3os/templates/base
if [ -d /run/systemd/system ]; then
  ./scripts/start-service.sh
else
  echo "systemd is not running here: starting b3osd in the background (scripts/start.sh)"
  ./scripts/start.sh
fi
