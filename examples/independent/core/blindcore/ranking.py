"""Ranking for the seed-003 ``search_knowledge`` tool: lexical, semantic, hybrid and RRF.

Pure functions, no state.  The choices (README, "Choices" 33-36):

* Lexical: BM25 with k1 = 0.9, b = 0.4 and idf ``ln((N + 1) / (n + 0.5))``; the title
  counts twice; the statistics are those of the documents the caller is searching.
  Tokens are casefolded ``\\w+`` with a light plural fold.
* Semantic: cosine of small deterministic sparse embeddings.  Each token is mapped
  through a hand-made concept table (synonyms share one feature), unknown words keep
  their stem as a feature, and every stem also adds hashed character 4-grams at a low
  weight.  So "automobile" finds a document about a "car" with no shared term.
* Hybrid: ``alpha * L / (1 + L) + (1 - alpha) * S`` (alpha is the lexical weight,
  clamped to 0..1); a saturating transform, not max normalisation.
* RRF: ``sum 1 / (60 + rank)`` over the lexical and semantic lists, ranks from 1.
"""
from __future__ import annotations

import math
import re
import zlib
from collections import Counter
from dataclasses import dataclass

TOKEN_RE = re.compile(r"\w+")
BM25_K1 = 0.9
BM25_B = 0.4
TITLE_WEIGHT = 2
RRF_K = 60
NGRAM = 4
NGRAM_BUCKETS = 1024
NGRAM_WEIGHT = 0.3
CONCEPT_WEIGHT = 1.0
WORD_WEIGHT = 1.0
MODES = ("hybrid", "lexical", "semantic", "rrf")

# A tiny hand-made concept table: words of one line share one semantic feature.
_CONCEPT_LINES: tuple[tuple[str, str], ...] = (
    ("deployment", "deploy deployment deploying deployed release rollout launch golive"),
    ("procedure", "runbook playbook procedure guide manual handbook instructions howto checklist"),
    ("vehicle", "car automobile vehicle auto truck van motorcar"),
    ("billing", "invoice bill billing payment charge pay fee receipt"),
    ("refund", "refund reimbursement repayment chargeback"),
    ("failure", "error failure fault bug crash outage incident breakdown malfunction"),
    ("credential", "password passphrase credential passcode pin login signin"),
    ("vacation", "holiday vacation leave pto furlough sabbatical"),
    ("employee", "employee staff worker personnel colleague"),
    ("physician", "doctor physician clinician medic surgeon"),
    ("fast", "fast quick rapid speedy swift"),
    ("large", "big large huge enormous massive"),
    ("purchase", "buy purchase acquire procure"),
    ("cancel", "cancel terminate abort revoke discontinue"),
    ("customer", "customer client buyer purchaser patron"),
    ("homepage", "homepage frontpage landing"),
    ("binding", "binding bind link attach connect association mapping"),
    ("domain", "domain hostname dns url website site"),
    ("security", "security safety protection defense"),
    ("shipment", "delivery shipment shipping courier parcel package"),
    ("database", "database db datastore sql postgres mysql"),
    ("server", "server host machine node instance"),
    ("schedule", "schedule calendar timetable agenda appointment"),
    ("meeting", "meeting conference standup"),
    ("contract", "contract agreement deal terms"),
    ("price", "price cost pricing rate tariff quote"),
    ("salary", "salary wage compensation payroll remuneration"),
    ("illness", "sick ill illness disease unwell"),
    ("happy", "happy glad joyful cheerful"),
    ("dog", "dog puppy canine hound"),
    ("cat", "cat kitten feline"),
    ("house", "house dwelling residence apartment"),
    ("begin", "begin start commence initiate kickoff"),
    ("finish", "finish complete conclude end"),
    ("help", "help support assistance aid helpdesk"),
    ("question", "question faq inquiry enquiry"),
    ("delete", "delete remove erase purge wipe"),
    ("update", "update modify change edit revise amend"),
    ("permission", "permission access authorization privilege role"),
    ("encryption", "encryption encrypt cipher crypto tls ssl"),
    ("mail", "email mail inbox newsletter"),
    ("phone", "phone telephone mobile cellphone smartphone"),
    ("food", "food meal lunch dinner breakfast cuisine"),
    ("travel", "travel trip journey flight itinerary"),
    ("money", "money cash funds currency"),
    ("weather", "weather forecast rain snow"),
    ("backup", "backup snapshot restore recovery"),
)

_SUFFIXES: tuple[str, ...] = ("ations", "ation", "ments", "ment", "ings", "ing", "ions", "ion",
                              "ers", "er", "ed", "es", "ly", "s")


def lex_token(tok: str) -> str:
    """Casefold with a light plural fold (the lexical vocabulary)."""
    tok = tok.casefold()
    if len(tok) > 3 and tok.endswith("s") and not tok.endswith("ss"):
        tok = tok[:-1]
    return tok


def lex_tokens(text: str) -> list[str]:
    return [lex_token(t) for t in TOKEN_RE.findall(text)]


def stem(tok: str) -> str:
    """A crude suffix stripper for the semantic vocabulary."""
    tok = tok.casefold()
    for suffix in _SUFFIXES:
        if tok.endswith(suffix) and len(tok) - len(suffix) >= 3:
            return tok[: -len(suffix)]
    return tok


def _build_concepts() -> dict[str, str]:
    table: dict[str, str] = {}
    for concept, words in _CONCEPT_LINES:
        for w in words.split():
            table.setdefault(w, concept)
            table.setdefault(stem(w), concept)
    return table


CONCEPT_OF: dict[str, str] = _build_concepts()

Vector = dict[str, float]


def embed(text: str, title: str = "") -> Vector:
    """A deterministic, L2-normalised sparse embedding of a title and a text."""
    raw: Counter[str] = Counter()
    for weight, part in ((TITLE_WEIGHT, title), (1, text)):
        for tok in TOKEN_RE.findall(part):
            low = tok.casefold()
            s = stem(low)
            concept = CONCEPT_OF.get(low) or CONCEPT_OF.get(s)
            if concept is not None:
                raw["c:" + concept] += CONCEPT_WEIGHT * weight
            else:
                raw["w:" + s] += WORD_WEIGHT * weight
            padded = "#" + s + "#"
            for i in range(max(1, len(padded) - NGRAM + 1)):
                bucket = zlib.crc32(padded[i:i + NGRAM].encode("utf-8")) % NGRAM_BUCKETS
                raw["g:%d" % bucket] += NGRAM_WEIGHT * weight
    vec = {k: 1.0 + math.log(v) if v >= 1.0 else v for k, v in raw.items()}
    norm = math.sqrt(sum(v * v for v in vec.values()))
    return {k: v / norm for k, v in vec.items()} if norm > 0 else {}


def cosine(a: Vector, b: Vector) -> float:
    if len(a) > len(b):
        a, b = b, a
    return sum(v * b.get(k, 0.0) for k, v in a.items())


@dataclass
class DocIndex:
    """What ranking needs of one revision (cached on the revision)."""
    tf: Counter[str]
    length: int
    vector: Vector


def index_document(title: str, content: str) -> DocIndex:
    tf: Counter[str] = Counter()
    for t in lex_tokens(title):
        tf[t] += TITLE_WEIGHT
    tf.update(lex_tokens(content))
    return DocIndex(tf=tf, length=sum(tf.values()), vector=embed(content, title))


def lexical_scores(query: str, docs: dict[str, DocIndex]) -> dict[str, float]:
    """BM25 of each document (k1 0.9, b 0.4); only documents with a query term score."""
    terms = set(lex_tokens(query))
    n_docs = len(docs)
    if not terms or not n_docs:
        return {}
    avgdl = sum(d.length for d in docs.values()) / n_docs or 1.0
    df = {t: sum(1 for d in docs.values() if t in d.tf) for t in terms}
    scores: dict[str, float] = {}
    for key, d in docs.items():
        s = 0.0
        for t in terms:
            f = d.tf.get(t, 0)
            if not f:
                continue
            idf = math.log((n_docs + 1) / (df[t] + 0.5))
            s += idf * f * (BM25_K1 + 1) / (f + BM25_K1 * (1 - BM25_B + BM25_B * d.length / avgdl))
        if s > 0:
            scores[key] = s
    return scores


def semantic_scores(query: str, docs: dict[str, DocIndex]) -> dict[str, float]:
    q = embed(query)
    scores: dict[str, float] = {}
    for key, d in docs.items():
        s = cosine(q, d.vector)
        if s > 1e-12:
            scores[key] = s
    return scores


def ordered(scores: dict[str, float]) -> list[str]:
    """Keys by score, best first; ties by key."""
    return sorted(scores, key=lambda k: (-scores[k], k))


def clamp_alpha(alpha: float) -> float:
    return min(1.0, max(0.0, float(alpha)))


def lexical_norm(score: float) -> float:
    return score / (1.0 + score)


def hybrid_scores(lex: dict[str, float], sem: dict[str, float], alpha: float) -> dict[str, float]:
    a = clamp_alpha(alpha)
    out: dict[str, float] = {}
    for key in set(lex) | set(sem):
        s = a * lexical_norm(lex.get(key, 0.0)) + (1.0 - a) * sem.get(key, 0.0)
        if s > 0:
            out[key] = s
    return out


def rrf_scores(lists: list[list[str]], k: int = RRF_K) -> dict[str, float]:
    out: dict[str, float] = {}
    for keys in lists:
        for rank, key in enumerate(keys, start=1):
            out[key] = out.get(key, 0.0) + 1.0 / (k + rank)
    return out


@dataclass
class Ranked:
    key: str
    scores: dict[str, float]


def rank(query: str, docs: dict[str, DocIndex], mode: str, alpha: float) -> list[Ranked]:
    """All hits of `mode`, best first, with the scores that produced the order."""
    lex = lexical_scores(query, docs)
    sem = semantic_scores(query, docs)
    if mode == "lexical":
        final = lex
    elif mode == "semantic":
        final = sem
    elif mode == "rrf":
        final = rrf_scores([ordered(lex), ordered(sem)])
    else:
        final = hybrid_scores(lex, sem, alpha)
    out: list[Ranked] = []
    for key in ordered(final):
        scores = {"lexical": lex.get(key, 0.0), "semantic": sem.get(key, 0.0)}
        if mode in ("hybrid", "rrf"):
            scores[mode] = final[key]
        scores["final"] = final[key]
        out.append(Ranked(key=key, scores=scores))
    return out
