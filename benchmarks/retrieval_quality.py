"""Retrieval quality of the simulator's ``search_knowledge`` tool: nDCG@10 per mode on the small
labelled corpus beside this script (``retrieval_corpus.json``). A script, not a test: it
measures, it asserts nothing.

Each query goes through the tool's Knowledge service route of an in-process simulator (the
path the MCP tool takes), so the figures are those of the shipped ranking: BM25, the default
offline embedding, hybrid at the given alpha, and RRF.

    python benchmarks/retrieval_quality.py                # the table and the mean per mode
    python benchmarks/retrieval_quality.py --alpha 0.3    # another hybrid weight
    python benchmarks/retrieval_quality.py --json         # machine-readable
    python benchmarks/retrieval_quality.py --embedder wordllama   # the real model (embeddings extra)

nDCG@10: gain ``2**relevance - 1`` discounted by ``log2(rank + 1)``, divided by the gain of
the ideal order of the labelled documents.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

from starlette.testclient import TestClient

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from simulator import create_app
from simulator.search_knowledge.routes import TOOL_PATH

CORPUS = Path(__file__).with_name("retrieval_corpus.json")
MODES = ("lexical", "semantic", "hybrid", "rrf")
CONTROL = {"authorization": "Bearer bench-control"}
K = 10


def ndcg(ranked: list[str], relevant: dict[str, int], k: int = K) -> float:
    def dcg(grades: list[int]) -> float:
        return float(sum((2**g - 1) / math.log2(i + 2) for i, g in enumerate(grades[:k])))

    ideal = dcg(sorted(relevant.values(), reverse=True))
    return dcg([relevant.get(item, 0) for item in ranked]) / ideal if ideal else 0.0


def measure(alpha: float, embedder: str = "hashed") -> dict[str, Any]:
    data = json.loads(CORPUS.read_text("utf-8"))
    client = TestClient(create_app(seed=1, demo=False, control_token="bench-control", embedder=embedder))
    client.post("/_control/v1/workspaces", json={"route": "bench"}, headers=CONTROL)
    items = [{"id": d["id"], "title": d["title"], "content": d["content"]} for d in data["documents"]]
    client.put("/_control/v1/workspaces/bench/corpus", json={"bases": [{"id": "kb", "items": items}]}, headers=CONTROL)
    token = client.post("/_control/v1/identities", json={"account": "bench", "route": "bench"}, headers=CONTROL).json()[
        "token"
    ]
    rows = []
    for entry in data["queries"]:
        row: dict[str, Any] = {"query": entry["query"]}
        for mode in MODES:
            body = client.post(
                TOOL_PATH.format(route="bench"),
                headers={"authorization": f"Bearer {token}"},
                json={"query": entry["query"], "mode": mode, "alpha": alpha, "max_results": K},
            ).json()
            row[mode] = ndcg([h["knowledge_item_id"] for h in body["results"]], entry["relevant"])
        rows.append(row)
    means = {mode: sum(r[mode] for r in rows) / len(rows) for mode in MODES}
    return {
        "k": K,
        "alpha": alpha,
        "embedder": embedder,
        "documents": len(items),
        "queries": len(rows),
        "per_query": rows,
        "mean": means,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--alpha", type=float, default=0.5, help="hybrid lexical weight (default 0.5)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument(
        "--embedder",
        default="hashed",
        help="the semantic embedding (default hashed; wordllama needs the embeddings extra)",
    )
    args = parser.parse_args(argv)
    result = measure(args.alpha, args.embedder)
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(
        f"nDCG@{K} on {result['documents']} documents, {result['queries']} queries (hybrid alpha {args.alpha}, "
        f"embedder {args.embedder})"
    )
    print(f"{'query':40} " + " ".join(f"{m:>8}" for m in MODES))
    for row in result["per_query"]:
        print(f"{row['query'][:40]:40} " + " ".join(f"{row[m]:8.3f}" for m in MODES))
    print(f"{'mean':40} " + " ".join(f"{result['mean'][m]:8.3f}" for m in MODES))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
