// Variant -> expected IDs -> IDs the suite failed (from reports/<variant>/results.json).
import fs from 'node:fs';
import path from 'node:path';
const here = path.dirname(path.dirname(new URL(import.meta.url).pathname));
const variants = JSON.parse(fs.readFileSync(path.join(here, 'variants.json'), 'utf8'));
const rows = [];
for (const v of variants) {
  const f = path.join(here, 'reports', v.name, 'results.json');
  if (!fs.existsSync(f)) { rows.push([v.name, v.breaks.join(' '), '(no results)', 'MISSED']); continue; }
  const r = JSON.parse(fs.readFileSync(f, 'utf8'));
  const failed = r.requirements.filter((q) => q.status === 'failed').map((q) => q.id);
  const caught = v.breaks.every((id) => failed.includes(id));
  rows.push([v.name, v.breaks.join(' '), failed.join(' ') || '-', caught ? 'caught' : 'MISSED', r.verdict]);
}
for (const row of rows) console.log(row.join(' | '));
