#!/bin/sh
# Run the conformance suite against knowledge-mcp-ts.
#   scripts/run-suite.sh [VARIANT] [PORT] [REPORT_DIR]
# VARIANT "" or "clean" = the clean server; otherwise a name of variants.json (MCPTS_BROKEN).
# Needs the suite installed at $KC (default: knowledge-conformance on PATH).
set -u
HERE=$(cd "$(dirname "$0")/.." && pwd)
VARIANT=${1:-clean}; [ "$VARIANT" = clean ] && VARIANT=""
PORT=${2:-8790}
REPORTS=${3:-$HERE/reports/${VARIANT:-clean}}
KC=${KC:-knowledge-conformance}
SUITE_DIR=${SUITE_DIR:-$(cd "$HERE/../../.." && pwd)}
export MCPTS_CONTROL_TOKEN=${MCPTS_CONTROL_TOKEN:-mcpts-control-token-$$}
mkdir -p "$REPORTS"
CFG="$REPORTS/target.toml"
BROKEN_ARGS=""
[ -n "$VARIANT" ] && BROKEN_ARGS=", \"--broken\", \"$VARIANT\""
cat > "$CFG" <<EOT
[target]
url = "http://127.0.0.1:$PORT"

[control]
url = "http://127.0.0.1:$PORT/_control/v1"
token = {env = "MCPTS_CONTROL_TOKEN"}

[mcp]
url = "http://127.0.0.1:$PORT/agent-api/v1/workspaces/{route}/mcp"
command = ["node", "$HERE/bin/knowledge-mcp-ts.mjs", "stdio", "--route", "{route}", "--core-url", "http://127.0.0.1:$PORT"$BROKEN_ARGS]
jobs_command = ["node", "$HERE/bin/knowledge-mcp-ts.mjs", "jobs"$BROKEN_ARGS]
transport = "both"
EOT
MCPTS_BROKEN="$VARIANT" node "$HERE/bin/knowledge-mcp-ts.mjs" serve --port "$PORT" > "$REPORTS/server.log" 2>&1 &
SERVER=$!
for _ in $(seq 50); do curl -s -o /dev/null "http://127.0.0.1:$PORT/" && break; sleep 0.2; done
cd "$SUITE_DIR" && "$KC" run --target-config "$CFG" --reports "$REPORTS" ${KC_ARGS:-} > "$REPORTS/suite.log" 2>&1
STATUS=$?
kill "$SERVER" 2>/dev/null; wait "$SERVER" 2>/dev/null
grep -E "^VERDICT|^  FAILED" "$REPORTS/suite.log"
echo "exit $STATUS (${VARIANT:-clean})"
exit $STATUS
