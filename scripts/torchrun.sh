#!/usr/bin/env bash
# torchrun with the stream settings that Debian's torch 1.13 on Python 3.11 needs:
# its default redirects crash, so stdout goes to a log directory and is teed back.
# Usage: scripts/torchrun.sh [torchrun options] --no_python build/loom train CONFIG.yaml ...
set -euo pipefail
log_dir="${LOOM_TORCHRUN_LOG_DIR:-$(mktemp -d "${TMPDIR:-/tmp}/loom-torchrun.XXXXXX")}"
exec torchrun --redirects 1 --tee 1 --log_dir "$log_dir" "$@"
