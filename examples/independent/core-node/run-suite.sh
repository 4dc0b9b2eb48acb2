#!/bin/sh
# Serve core-node (optionally a broken variant) on a free loopback port and run the suite once.
#   ./run-suite.sh [VARIANT] [REPORT_DIR]
set -u
here=$(cd "$(dirname "$0")" && pwd)
variant=${1:-}
reports=${2:-${TMPDIR:-/tmp}/core-node-reports/${variant:-clean}}
port=${PORT:-$(python3 -c "import socket;s=socket.socket();s.bind(('127.0.0.1',0));print(s.getsockname()[1])")}
export NODECORE_CONTROL_TOKEN=${NODECORE_CONTROL_TOKEN:-core-node-control-$(od -An -N8 -tx1 /dev/urandom | tr -d ' \n')}
NODECORE_BROKEN="$variant" node "$here/server.mjs" --host 127.0.0.1 --port "$port" 2>"$reports.server.log" &
pid=$!
for _ in $(seq 50); do curl -s -o /dev/null "http://127.0.0.1:$port/" && break; sleep 0.1; done
kill -0 "$pid" 2>/dev/null || { echo "server did not start"; cat "$reports.server.log"; exit 7; }
mkdir -p "$reports"
sed "s/127.0.0.1:8780/127.0.0.1:$port/" "$here/target.toml" > "$reports.target.toml"
${KNOWLEDGE_CONFORMANCE:-knowledge-conformance} run --target "http://127.0.0.1:$port" \
  --target-config "$reports.target.toml" --report-dir "$reports" > "$reports.out" 2>&1
rc=$?
kill "$pid"
echo "exit=$rc"
grep -E "^(VERDICT|  FAILED)" "$reports.out"
exit $rc
