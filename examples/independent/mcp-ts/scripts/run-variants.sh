#!/bin/sh
# Run the suite once per broken variant (three at a time) and summarise: variant, expected IDs, failed IDs.
HERE=$(cd "$(dirname "$0")/.." && pwd)
NAMES=$(node -e "for (const v of require('$HERE/variants.json')) console.log(v.name)")
run() { "$HERE/scripts/run-suite.sh" "$1" "$2" > /dev/null 2>&1; }
set -- $NAMES
while [ $# -gt 0 ]; do
  P=8801
  for n in 1 2 3; do
    [ $# -gt 0 ] || break
    run "$1" $P & P=$((P+1)); shift
  done
  wait
done
node "$HERE/scripts/summarise.mjs"
