#!/usr/bin/env bash
# Build the one-folder attnexplorer bundle with PyInstaller, report its size, and run
# `attnexplorer --self-test` against it (from another folder, so that the checkout cannot
# stand in for anything the bundle lacks).
#
#   bash packaging/build.sh            # uses python3 (or $PYTHON)
#
# Needs: the app's dependencies with a CPU torch, and pyinstaller (`pip install -e ".[bundle]"`).
# Output: dist/attnexplorer/ (run dist/attnexplorer/attnexplorer); work files in build/pyinstaller/.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}

# A CUDA torch would add gigabytes of CUDA libraries to the bundle; the bundle is CPU-only.
if ! "$PYTHON" - <<'PY'
import sys
import torch
if torch.version.cuda is not None or getattr(torch.version, "hip", None):
    print(f"build.sh: torch {torch.__version__} is a GPU build; the bundle wants a CPU torch:\n"
          "    python3 -m pip install torch --index-url https://download.pytorch.org/whl/cpu\n"
          "(or set ALLOW_GPU_TORCH=1 to bundle it anyway)", file=sys.stderr)
    sys.exit(1)
print(f"build.sh: bundling torch {torch.__version__} (CPU)")
PY
then
    [ "${ALLOW_GPU_TORCH:-0}" = "1" ] || exit 1
fi

start=$(date +%s)
"$PYTHON" -m PyInstaller --noconfirm --clean --log-level WARN \
    --distpath dist --workpath build/pyinstaller packaging/attnexplorer.spec
end=$(date +%s)

bundle=dist/attnexplorer
echo "build.sh: built $bundle in $((end - start)) s"
echo "build.sh: bundle size $(du -sh "$bundle" | cut -f1) ($(find "$bundle" -type f | wc -l) files)"
echo "build.sh: largest parts:"
du -sh "$bundle"/_internal/* 2>/dev/null | sort -rh | head -8 | sed 's/^/    /'

app=$(cd "$bundle" && pwd)/attnexplorer
echo "build.sh: running the self-test against the bundle"
(cd "${TMPDIR:-/tmp}" && env -u PYTHONPATH QT_QPA_PLATFORM=offscreen "$app" --self-test)
