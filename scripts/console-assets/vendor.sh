#!/usr/bin/env bash
# Refreshes the console's vendored browser files from npm, reproducibly (package-lock.json pins every
# package by version and integrity hash). The built files are committed, so neither installing nor
# testing the package needs npm; run this only to change the vendored version (edit package.json, then
# `npm install --package-lock-only --ignore-scripts` and this script).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
DEST="$HERE/../../src/mlsandbox/console/static/vendor"
cd "$HERE"
npm ci --ignore-scripts --no-audit --no-fund
mkdir -p "$DEST"
cp node_modules/chart.js/dist/chart.umd.min.js "$DEST/chart.umd.min.js"
cp node_modules/chart.js/LICENSE.md "$DEST/chart.js.LICENSE.md"
# The UMD bundle includes @kurkle/color (MIT): its licence ships beside it.
cp node_modules/@kurkle/color/LICENSE.md "$DEST/kurkle-color.LICENSE.md"
rm -rf node_modules
echo "vendored chart.js $(node -p "require('./package-lock.json').packages['node_modules/chart.js'].version") into $DEST"
