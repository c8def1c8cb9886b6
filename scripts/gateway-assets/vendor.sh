#!/usr/bin/env bash
# Refreshes the gateway's vendored Swagger UI files from npm, reproducibly (package-lock.json pins the
# package by version and integrity hash). The files are committed, so neither installing nor testing the
# package needs npm; run this only to change the vendored version (edit package.json, then
# `npm install --package-lock-only --ignore-scripts` and this script).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
DEST="$HERE/../../src/mlsandbox/gateway/static/swagger"
cd "$HERE"
npm ci --ignore-scripts --no-audit --no-fund
mkdir -p "$DEST"
for f in swagger-ui-bundle.js swagger-ui.css favicon-32x32.png LICENSE NOTICE; do
  cp "node_modules/swagger-ui-dist/$f" "$DEST/$f"
done
rm -rf node_modules
echo "vendored swagger-ui-dist $(node -p "require('./package-lock.json').packages['node_modules/swagger-ui-dist'].version") into $DEST"
