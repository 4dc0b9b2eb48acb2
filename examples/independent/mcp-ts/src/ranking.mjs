// Lexical (BM25), semantic (hashed character-trigram embedding) and their fusions.
import { broken } from './broken.mjs';

const WORD = /[\p{L}\p{N}\p{M}_]+/gu;
export function tokens(text) {
  return (text.toLowerCase().match(WORD) || []);
}

const DIM = 512;
function fnv1a(s) {
  let h = 0x811c9dc5;
  for (let i = 0; i < s.length; i++) { h ^= s.charCodeAt(i); h = Math.imul(h, 0x01000193) >>> 0; }
  return h >>> 0;
}

// Embedding of a bag of words: each word as #word#, its code-point trigrams hashed into DIM buckets.
export function embed(wordCounts) {
  const v = new Float64Array(DIM);
  for (const [w, n] of wordCounts) {
    const cps = Array.from('#' + w + '#');
    const weight = 1 + Math.log(n);
    for (let i = 0; i + 3 <= cps.length; i++) {
      const g = cps.slice(i, i + 3).join('');
      const h = fnv1a(g);
      v[h % DIM] += weight;
    }
  }
  let norm = 0; for (const x of v) norm += x * x; norm = Math.sqrt(norm);
  if (norm > 0) for (let i = 0; i < DIM; i++) v[i] /= norm;
  return v;
}
function cosine(a, b) { let s = 0; for (let i = 0; i < DIM; i++) s += a[i] * b[i]; return s; }

// Per-revision analysis, cached on the revision object.
export function analyse(rev) {
  if (rev._an) return rev._an;
  const toks = tokens((rev.title || '') + ' ' + rev.content);
  const tf = new Map();
  for (const t of toks) tf.set(t, (tf.get(t) || 0) + 1);
  rev._an = { len: toks.length, tf, vec: embed(tf) };
  return rev._an;
}

// docs: [{key, rev}] the candidates; stats: [{rev}] the corpus statistics (all searchable documents).
function analyseDoc(d) { // analysis cached on the item (its first indexed revision), not on the revision
  if (!broken('sk_index_cached_per_item') || !d.item) return analyse(d.rev);
  if (!d.item._an) d.item._an = analyse(d.rev);
  return d.item._an;
}
export function lexicalScores(query, docs, stats) {
  const q = [...new Set(tokens(query))];
  const N = stats.length || 1;
  let avg = 0; for (const d of stats) avg += analyseDoc(d).len; avg = avg / N || 1;
  const df = new Map();
  for (const t of q) { let n = 0; for (const d of stats) if (analyseDoc(d).tf.has(t)) n++; df.set(t, n); }
  const k1 = 1.2, b = 0.75;
  const out = new Map();
  for (const d of docs) {
    const a = analyseDoc(d); let s = 0;
    for (const t of q) {
      const f = a.tf.get(t) || 0; if (!f) continue;
      const n = df.get(t) || 0;
      const idf = Math.log(1 + (N - n + 0.5) / (n + 0.5));
      s += idf * (f * (k1 + 1)) / (f + k1 * (1 - b + b * a.len / avg));
    }
    out.set(d.key, s);
  }
  return out;
}

export function semanticScores(query, docs) {
  const tf = new Map(); for (const t of tokens(query)) tf.set(t, (tf.get(t) || 0) + 1);
  const qv = embed(tf);
  const out = new Map();
  for (const d of docs) out.set(d.key, Math.max(0, cosine(qv, analyseDoc(d).vec)));
  return out;
}

function rankList(scores) {
  return [...scores.entries()].filter(([, s]) => s > 0).sort((x, y) => y[1] - x[1] || (x[0] < y[0] ? -1 : x[0] > y[0] ? 1 : 0));
}

export const MODES = ['hybrid', 'lexical', 'semantic', 'rrf'];
export function normaliseMode(mode) {
  const m = String(mode ?? '').trim().toLowerCase();
  return MODES.includes(m) ? m : 'hybrid';
}

// Returns [{key, scores:{lexical, semantic, hybrid|rrf, final}}] ranked, only documents with evidence.
export function rank(query, docs, stats, mode, alpha) {
  const lex = lexicalScores(query, docs, stats);
  const sem = semanticScores(query, docs);
  const rows = [];
  if (mode === 'lexical' || mode === 'semantic') {
    const src = mode === 'lexical' ? lex : sem;
    for (const d of docs) {
      const s = src.get(d.key);
      if (s > 0) rows.push({ key: d.key, best: 0, scores: { lexical: lex.get(d.key), semantic: sem.get(d.key), final: s } });
    }
  } else if (mode === 'rrf') {
    const lr = rankList(lex), sr = rankList(sem);
    const pos = new Map();
    lr.forEach(([k], i) => pos.set(k, { l: i + 1 }));
    sr.forEach(([k], i) => { const p = pos.get(k) || {}; p.s = i + 1; pos.set(k, p); });
    for (const [k, p] of pos) {
      const f = (p.l ? 1 / (60 + p.l) : 0) + (p.s ? 1 / (60 + p.s) : 0);
      rows.push({ key: k, best: Math.min(p.l || Infinity, p.s || Infinity), scores: { lexical: lex.get(k), semantic: sem.get(k), rrf: f, final: f } });
    }
  } else {
    let a = Number(alpha); if (!Number.isFinite(a)) a = 0.5;
    if (!broken('sk_alpha_unclamped')) a = Math.min(1, Math.max(0, a));
    if (broken('sk_alpha_semantic')) a = 1 - a;
    let ml = 0, ms = 0;
    for (const d of docs) { ml = Math.max(ml, lex.get(d.key)); ms = Math.max(ms, sem.get(d.key)); }
    for (const d of docs) {
      const l = ml > 0 ? lex.get(d.key) / ml : 0, s = ms > 0 ? sem.get(d.key) / ms : 0;
      const f = a * l + (1 - a) * s;
      if (lex.get(d.key) > 0 || sem.get(d.key) > 0) rows.push({ key: d.key, best: 0, scores: { lexical: lex.get(d.key), semantic: sem.get(d.key), hybrid: f, final: f } });
    }
  }
  rows.sort((x, y) => y.scores.final - x.scores.final || x.best - y.best || (x.key < y.key ? -1 : x.key > y.key ? 1 : 0));
  return rows;
}
