#!/usr/bin/env bash
# Fetch the console's vendored scripts from the npm registry (ADR 0108) into
# operator/kubeturn/console/static/, with their licences, and print their sha256 sums for
# the ADR's table and tests/test_static_assets.py. Usage: .ci/vendor-console-assets.sh
set -euo pipefail
cd "$(dirname "$0")/.."
HTMX=2.0.11
MERMAID=11.17.2
STATIC=operator/kubeturn/console/static
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
(cd "$work" && npm pack --silent "htmx.org@$HTMX" "mermaid@$MERMAID" >/dev/null)
mkdir -p "$work/htmx" "$work/mermaid"
tar -xzf "$work/htmx.org-$HTMX.tgz" -C "$work/htmx"
tar -xzf "$work/mermaid-$MERMAID.tgz" -C "$work/mermaid"
cp "$work/htmx/package/dist/htmx.min.js" "$STATIC/htmx.min.js"
cp "$work/htmx/package/LICENSE" "$STATIC/htmx.LICENSE"
cp "$work/mermaid/package/dist/mermaid.min.js" "$STATIC/mermaid.min.js"
cp "$work/mermaid/package/LICENSE" "$STATIC/mermaid.LICENSE"
sha256sum "$STATIC/htmx.min.js" "$STATIC/mermaid.min.js"
