"""Mutation score of the conformance suite over the simulator's contract logic.

Why: a suite that passes the clean simulator and fails every quirk can still be
blind to small deviations nobody wrote a quirk for. Cosmic Ray mutates
``simulator/core.py``, ``sizing.py`` and ``signing.py`` one change at a time; the
killer is the whole conformance suite run in-process against the mutated
simulator (exit 0 = the mutant survived). Every survivor must be triaged in
``benchmarks/mutation-triage.yaml`` (equivalent / out-of-contract / needs-probe / hang). Only a
named broken rule (exit 1) kills: incomplete (6), harness error (7) and a timeout are survivors.

Slow (about an hour on two cores), so it is not part of the project's tests
(testpaths is ``tests/``) nor of CI. Run it by hand or with ``tox -e mutation``::

    pip install -e '.[mutation]'
    python benchmarks/mutation.py                    # the whole run, then the report
    python benchmarks/mutation.py --module simulator/signing.py   # one file, for iterating
    python benchmarks/mutation.py report SESSION.sqlite           # report a kept session again

Each worker mutates its own copy of ``simulator/`` (Cosmic Ray's HTTP
distributor, one worker per core on loopback) and runs the suite with that copy
first on ``PYTHONPATH``, so the checkout is never touched and the editable
install still serves ``conformance`` and ``knowledge_schemas``.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import warnings
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
TRIAGE = Path(__file__).with_name("mutation-triage.yaml")
MODULES = ("simulator/core.py", "simulator/sizing.py", "simulator/signing.py")
# The MCP servers and the search_knowledge tool (``--surface mcp``): judged by the suite's MCP and
# search_knowledge tests only, which is what drives them (the server tests never reach this code).
MCP_MODULES = (
    "simulator/mcp/tools.py",
    "simulator/mcp/server.py",
    "simulator/mcp/jobs.py",
    "simulator/search_knowledge/tool.py",
    "simulator/search_knowledge/ranking.py",
    "simulator/search_knowledge/store.py",
    "simulator/search_knowledge/routes.py",
)
SURFACES = {
    "server": (MODULES, ("--pyargs", "conformance.suite")),
    "mcp": (
        MCP_MODULES,
        ("--pyargs", "conformance.suite.mcp", "conformance.suite.search_knowledge", "--scope", "mcp,tool@control"),
    ),
}
# The killer: the conformance suite, in-process against the bundled simulator. It stops at the
# first failed test (-x), so a failed SHOULD must end the run with exit 1 too (--fail-on should):
# otherwise a mutant that breaks a SHOULD first stops the run before the MUST it breaks later,
# and the run ends incomplete (6), a survivor.
SUITE = ["-m", "pytest", "-q", "-p", "no:cacheprovider", "-x", "--fail-on", "should", "--no-shrink", "--assert=plain"]
KILLED = 1  # only a named broken rule is a kill: 6 (incomplete) or 7 (harness error) gives a user no verdict
NOT_SAMPLED = "not sampled"
EXIT_MARK = "mutation-killer exit="
ANNOTATION = "inside a type annotation"
INVALID = "not valid Python"
VERDICTS = ("equivalent", "out-of-contract", "needs-probe", "hang")
# "hang": the mutant makes the Core never answer; the seeds set no time bound, so the suite
# stops such a run with the unresponsive target named (exit 7), a survivor in the score.
# What each worker copies. pytest puts the root above ``conformance/suite`` first
# on sys.path, so the suite must come from the copy too or it would import the
# checkout's (unmutated) simulator; ``knowledge_schemas`` still comes from the install.
COPIED = ("simulator", "conformance")
# Cosmic Ray replaces every binary operator by each of the eleven others and every
# comparison by each of the seven others. The default run leaves out the bitwise,
# shift and power stand-ins for arithmetic and the identity comparisons (`is`,
# `is not`): about a third of all mutants, each one almost always dead or alive
# together with the arithmetic / relational swap on the same node. On two shared
# cores that is the difference between one hour and three; `--all-operators`
# runs them too.
NARROWED = (
    r"core/ReplaceBinaryOperator_\w+_(BitAnd|BitOr|BitXor|LShift|RShift|Pow)$",
    r"core/ReplaceComparisonOperator_\w+_(Is|IsNot)$",
)


# ----------------------------------------------------------------- killer
def killer(surface: str) -> int:
    """The test command each worker runs: the surface's part of the suite, then its exit code on the
    last line (Cosmic Ray keeps only "killed or not"; the code tells a failed MUST from a harness error)."""
    with tempfile.TemporaryDirectory(prefix="mutation-report-") as reports:
        cmd = [sys.executable, *SUITE, *SURFACES[surface][1], "--report-dir", reports]
        code = subprocess.run(cmd, check=False).returncode
    print(f"{EXIT_MARK}{code}", flush=True)
    return code


# ------------------------------------------------------------------- run
def _config(
    modules: list[str], timeout: float, urls: list[str], exclude: tuple[str, ...], script: Path, surface: str
) -> str:
    command = f"{sys.executable} {script} killer --surface {surface}"
    lines = [
        "[cosmic-ray]",
        f"module-path = [{', '.join(json.dumps(m) for m in modules)}]",
        f"timeout = {timeout}",
        "excluded-modules = []",
        f"test-command = {json.dumps(command)}",
        "",
        "[cosmic-ray.distributor]",
        'name = "http"',
        "",
        "[cosmic-ray.distributor.http]",
        f"worker-urls = [{', '.join(json.dumps(u) for u in urls)}]",
        "",
        "[cosmic-ray.filters.operators-filter]",
        f"exclude-operators = [{', '.join(json.dumps(e) for e in exclude)}]",
        "",
    ]
    return "\n".join(lines)


def _annotation_spans(path: Path) -> list[tuple[tuple[int, int], tuple[int, int]]]:
    """Where the type annotations of a module are: ``from __future__ import
    annotations`` keeps them unevaluated, so a mutant inside one is equivalent by construction."""
    spans = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        found: list[ast.expr | None] = []
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            found.append(node.returns)
        elif isinstance(node, ast.arg | ast.AnnAssign):
            found.append(node.annotation)
        for ann in filter(None, found):
            spans.append(((ann.lineno, ann.col_offset), (ann.end_lineno or ann.lineno, ann.end_col_offset or 0)))
    return spans


def skip_annotations(session: Path, copy: Path) -> int:
    """Mark the mutants that sit inside a type annotation as skipped (not run, or their result overridden),
    leaving those already skipped (pragma, narrowed operators) as they are."""
    from cosmic_ray.work_db import WorkDB, use_db
    from cosmic_ray.work_item import WorkerOutcome, WorkResult

    spans: dict[str, list[tuple[tuple[int, int], tuple[int, int]]]] = {}
    skipped = 0
    with use_db(str(session), WorkDB.Mode.open) as db:
        done = dict(db.results)
        for item in list(db.work_items):
            if item.job_id in done and done[item.job_id].worker_outcome == WorkerOutcome.SKIPPED:
                continue
            (spec,) = item.mutations
            module = str(spec.module_path)
            if module not in spans:
                spans[module] = _annotation_spans(copy / module)
            start, end = tuple(spec.start_pos), tuple(spec.end_pos)
            if any(lo <= start and end <= hi for lo, hi in spans[module]):
                db.set_result(item.job_id, WorkResult(output=ANNOTATION, worker_outcome=WorkerOutcome.SKIPPED))
                skipped += 1
    return skipped


def compiles(source: str, operator: str, occurrence: int) -> bool:
    """Whether the mutant is valid Python. Cosmic Ray also turns ``**`` unpacking
    and the ``*`` keyword-only marker into other operators, which is a syntax
    error: the simulator then fails to import and the suite reports a harness
    error, which would count as a kill the suite did not earn."""
    from cosmic_ray.mutating import mutate_code
    from cosmic_ray.plugins import get_operator

    mutated = mutate_code(source, get_operator(operator)(), occurrence)
    if mutated is None:
        return True
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", SyntaxWarning)  # `is` with a literal: valid, if odd
            compile(mutated, "<mutant>", "exec")
    except SyntaxError:
        return False
    return True


def skip_invalid(session: Path, copy: Path) -> int:
    """Mark the pending mutants that are not valid Python as skipped (never run)."""
    from cosmic_ray.work_db import WorkDB, use_db
    from cosmic_ray.work_item import WorkerOutcome, WorkResult

    sources: dict[str, str] = {}
    skipped = 0
    with use_db(str(session), WorkDB.Mode.open) as db:
        for item in list(db.pending_work_items):
            (spec,) = item.mutations
            module = str(spec.module_path)
            source = sources.setdefault(module, (copy / module).read_text(encoding="utf-8"))
            if not compiles(source, spec.operator_name, spec.occurrence):
                db.set_result(item.job_id, WorkResult(output=INVALID, worker_outcome=WorkerOutcome.SKIPPED))
                skipped += 1
    return skipped


def sample(session: Path, per_module: int, seed: int) -> int:
    """Keep ``per_module`` pending mutants of each module, drawn with ``seed``; mark the rest as not
    sampled (skipped, never run). The score of a sample estimates the whole run's in a fraction of its time."""
    import random

    from cosmic_ray.work_db import WorkDB, use_db
    from cosmic_ray.work_item import WorkerOutcome, WorkResult

    left_out = 0
    with use_db(str(session), WorkDB.Mode.open) as db:
        by_module: dict[str, list[str]] = {}
        for item in sorted(db.pending_work_items, key=lambda i: i.job_id):
            (spec,) = item.mutations
            by_module.setdefault(str(spec.module_path), []).append(item.job_id)
        draw = random.Random(seed)
        for module in sorted(by_module):
            jobs = by_module[module]
            kept = set(draw.sample(jobs, min(per_module, len(jobs))))
            for job in jobs:
                if job not in kept:
                    db.set_result(job, WorkResult(output=NOT_SAMPLED, worker_outcome=WorkerOutcome.SKIPPED))
                    left_out += 1
    return left_out


def forget_survivors(session: Path) -> int:
    """Make the kept session's survivors pending again: after the suite gained probes, only
    they can change outcome (a killed mutant stays killed by a stronger suite)."""
    import sqlite3

    with contextlib.closing(sqlite3.connect(session)) as db, db:
        return db.execute("DELETE FROM work_results WHERE test_outcome = 'SURVIVED'").rowcount


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _cosmic_ray(*args: str) -> list[str]:
    return [sys.executable, "-m", "cosmic_ray.cli", *args]


def _worker_env(copy: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(copy), *filter(None, [env.get("PYTHONPATH")])])
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def _judge(copy: Path, surface: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            str(copy.parent / Path(__file__).name),
            "killer",
            "--surface",
            surface,
        ],
        cwd=copy,
        env=_worker_env(copy),
        capture_output=True,
        text=True,
        check=False,
    )


def _canary(copy: Path, surface: str) -> None:
    """Break the copy's Core on purpose once: if the suite still passes, it is not
    judging the copy (a path mix-up), and every mutant would "survive"."""
    core = copy / "simulator" / "core.py"
    source = core.read_text(encoding="utf-8")
    broken = source.replace("return Caller(ident, route)", "raise ApiError(500, 'canary', 'canary')")
    if broken == source:
        raise SystemExit("mutation: the canary's line is gone from simulator/core.py; update _canary")
    core.write_text(broken, encoding="utf-8")
    try:
        if _judge(copy, surface).returncode == 0:
            raise SystemExit(
                "mutation: the suite passed a deliberately broken copy; it is not testing the mutated files"
            )
    finally:
        core.write_text(source, encoding="utf-8")
    print("mutation: canary killed (the suite judges the mutated copy)", flush=True)


@contextlib.contextmanager
def _workers(copies: list[Path], ports: list[int]) -> Iterator[None]:
    """One ``cosmic-ray http-worker`` per copy, on loopback; stopped on the way out."""
    procs = [
        subprocess.Popen(
            _cosmic_ray("http-worker", "--port", str(port)),
            cwd=copy,
            env=_worker_env(copy),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for copy, port in zip(copies, ports, strict=True)
    ]
    try:
        for port in ports:
            deadline = time.monotonic() + 60
            while True:
                with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
                    break
                if time.monotonic() > deadline:
                    raise SystemExit(f"mutation: the worker on port {port} did not start")
                time.sleep(0.2)
        yield
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()


def run(args: argparse.Namespace) -> int:
    work = Path(args.work_dir or tempfile.mkdtemp(prefix="mutation-")).resolve()
    work.mkdir(parents=True, exist_ok=True)
    copies = [work / f"worker{i}" for i in range(args.workers)]
    for copy in copies:
        shutil.rmtree(copy, ignore_errors=True)  # a resumed run starts from clean copies too
        for package in COPIED:
            shutil.copytree(ROOT / package, copy / package, ignore=shutil.ignore_patterns("__pycache__"))
    session = work / "session.sqlite"
    ports = [_free_port() for _ in copies]
    config = work / "cosmic-ray.toml"
    exclude = () if args.all_operators else NARROWED
    script = work / Path(__file__).name  # the killer runs from a copy: editing this file mid-run cannot break it
    shutil.copyfile(Path(__file__), script)
    modules = SURFACES[args.surface][0]
    config.write_text(
        _config(
            args.module or list(modules),
            args.timeout,
            [f"http://127.0.0.1:{p}" for p in ports],
            exclude,
            script,
            args.surface,
        )
    )

    print(f"mutation: work dir {work}", flush=True)
    resume = args.resume and session.exists()
    if not resume:
        subprocess.run(_cosmic_ray("init", str(config), str(session)), cwd=copies[0], check=True)
        subprocess.run(
            [sys.executable, "-m", "cosmic_ray.tools.filters.pragma_no_mutate", str(session)], cwd=copies[0], check=True
        )
        subprocess.run(
            [sys.executable, "-m", "cosmic_ray.tools.filters.operators_filter", str(session), str(config)],
            cwd=copies[0],
            check=True,
        )
    if resume and args.rerun_survivors:
        print(
            f"mutation: {forget_survivors(session)} survivor(s) of the kept session judged again by today's suite",
            flush=True,
        )
    print(
        f"mutation: {skip_annotations(session, copies[0])} mutant(s) inside type annotations skipped as equivalent",
        flush=True,
    )
    print(f"mutation: {skip_invalid(session, copies[0])} mutant(s) that are not valid Python skipped", flush=True)
    if args.sample and not resume:
        left_out = sample(session, args.sample, args.seed)
        print(f"mutation: sampled {args.sample} per module (seed {args.seed}); {left_out} left out", flush=True)

    if not resume:
        started = time.monotonic()
        baseline = _judge(copies[0], args.surface)
        baseline_s = time.monotonic() - started
        if baseline.returncode != 0:
            print(baseline.stdout[-3000:])
            raise SystemExit(
                f"mutation: the suite fails the unmutated simulator (exit {baseline.returncode}); fix that first"
            )
        print(f"mutation: baseline suite run {baseline_s:.1f} s, timeout per mutant {args.timeout:.0f} s", flush=True)
        _canary(copies[0], args.surface)

    started = time.monotonic()
    with _workers(copies, ports):
        subprocess.run(_cosmic_ray("exec", str(config), str(session)), cwd=copies[0], check=True)
    wall = time.monotonic() - started
    code = report(session, wall=wall, workers=args.workers)
    if not args.work_dir:
        for copy in copies:
            shutil.rmtree(copy, ignore_errors=True)
        print(
            f"mutation: session kept at {session} (`python {Path(__file__).name} report {session}` prints this again)"
        )
    return code


# ---------------------------------------------------------------- report
@dataclass(frozen=True)
class Mutant:
    """One mutant's outcome, with what the triage file keys it by."""

    job_id: str
    file: str
    line: int
    operator: str
    original: str
    mutated: str
    outcome: (
        str  # killed / survived / timeout / incompetent / skipped (pragma) / narrowed (operator left out) / pending
    )
    exit_code: int | None

    def key(self) -> tuple[str, str, str, str]:
        return (self.file, self.operator, self.original, self.mutated)

    def show(self) -> str:
        return f"{self.file}:{self.line} {self.operator}\n      - {self.original}\n      + {self.mutated}"


def _diff_lines(diff: str | None) -> tuple[str, str]:
    removed, added = [], []
    for line in (diff or "").splitlines():
        if line.startswith("-") and not line.startswith("---"):
            removed.append(line[1:].strip())
        elif line.startswith("+") and not line.startswith("+++"):
            added.append(line[1:].strip())
    return " / ".join(removed), " / ".join(added)


def _exit_code(output: str | None) -> int | None:
    for line in reversed((output or "").splitlines()):
        if line.startswith(EXIT_MARK):
            return int(line[len(EXIT_MARK) :])
    return None


HARNESS_ERROR = 7


def _valid(spec: Any, _sources: dict[str, str] = {}) -> bool:  # noqa: B006 (a cache on purpose)
    path = ROOT / str(spec.module_path)
    source = _sources.setdefault(str(path), path.read_text(encoding="utf-8"))
    return compiles(source, spec.operator_name, spec.occurrence)


def load_mutants(session: Path) -> list[Mutant]:
    from cosmic_ray.work_db import WorkDB, use_db
    from cosmic_ray.work_item import TestOutcome, WorkerOutcome

    mutants = []
    with use_db(str(session), WorkDB.Mode.open) as db:
        results = dict(db.results)
        for item in db.work_items:
            (spec,) = item.mutations
            result = results.get(item.job_id)
            original = mutated = ""
            code = None
            if result is None:
                outcome = "pending"
            elif result.worker_outcome == WorkerOutcome.SKIPPED:
                outcome = {
                    "Filtered operator": "narrowed",
                    ANNOTATION: "annotation",
                    INVALID: "invalid",
                    NOT_SAMPLED: "unsampled",
                }.get(result.output or "", "skipped")
            elif result.test_outcome == TestOutcome.SURVIVED:
                outcome = "survived"
            elif result.test_outcome == TestOutcome.KILLED:
                outcome = "timeout" if result.output == "timeout" else "killed"
                if outcome == "killed" and _exit_code(result.output) == HARNESS_ERROR and not _valid(spec):
                    outcome = "invalid"  # run before the syntax check existed: its "kill" was an import failure
                elif outcome == "killed" and _exit_code(result.output) != KILLED:
                    outcome = "survived"  # no named broken rule (incomplete, harness error): a user gets no verdict
            else:
                outcome = "incompetent"  # the mutant could not be made or run: neither killed nor survived
            if result is not None:
                original, mutated = _diff_lines(result.diff)
                code = _exit_code(result.output)
            mutants.append(
                Mutant(
                    item.job_id,
                    str(spec.module_path),
                    spec.start_pos[0],
                    spec.operator_name,
                    original,
                    mutated,
                    outcome,
                    code,
                )
            )
    return mutants


def load_triage(path: Path = TRIAGE) -> dict[tuple[str, str, str, str], dict[str, Any]]:
    entries = yaml.safe_load(path.read_text(encoding="utf-8")) if path.exists() else None
    table: dict[tuple[str, str, str, str], dict[str, Any]] = {}
    for entry in (entries or {}).get("survivors", []):
        if entry["verdict"] == "needs-probe" and not entry.get("probe"):
            raise SystemExit(
                f"mutation: {path.name}: a needs-probe entry says no probe at {entry['file']}:{entry['line']}"
            )
        if entry["verdict"] not in VERDICTS:
            raise SystemExit(
                f"mutation: {path.name}: unknown verdict {entry['verdict']!r} at {entry['file']}:{entry['line']}"
            )
        table[(entry["file"], entry["operator"], entry["original"], entry["mutated"])] = entry
    return table


def report(session: Path, *, wall: float | None = None, workers: int | None = None) -> int:
    """Print the figures and every survivor with its triage; exit 1 when a survivor is untriaged."""
    mutants = load_mutants(session)
    counts = Counter(m.outcome for m in mutants)
    triage = load_triage()
    # A timeout gave a user no verdict either: a survivor to triage like exit 6 and 7.
    survivors = [m for m in mutants if m.outcome in ("survived", "timeout")]
    verdicts: Counter[str] = Counter()
    untriaged = []
    print("\nSurvivors (file:line operator, then the line before and after):")
    for m in sorted(survivors, key=lambda m: (m.file, m.line, m.operator)):
        entry = triage.get(m.key())
        label = entry["verdict"] if entry else "UNTRIAGED"
        verdicts[label] += 1
        if entry is None:
            untriaged.append(m)
        print(f"  [{label}] {m.show()}")
        if entry:
            print(f"      why: {entry['reason']}")
            if entry.get("probe"):
                print(f"      probe: {entry['probe']}")
    narrowed = re.compile("|".join(NARROWED)) if counts["narrowed"] else None
    stale = {key for key in set(triage) - {m.key() for m in survivors} if not (narrowed and narrowed.match(key[1]))}
    tested = counts["killed"] + counts["timeout"] + counts["survived"]
    # Mutants inside annotations are equivalent by construction: counted as tested and equivalent.
    tested += counts["annotation"]
    verdicts["equivalent"] += counts["annotation"]
    denominator = tested - verdicts["equivalent"] - verdicts["out-of-contract"]
    killed = counts["killed"]
    no_verdict = Counter(m.exit_code for m in survivors if m.exit_code not in (0, None))
    files = sorted({m.file for m in mutants})
    print(f"\nMutation score of the conformance suite over {', '.join(files)}")
    print(
        f"  mutants total      {len(mutants)}  (operators left out by the default narrowing: {counts['narrowed']}; "
        f"left out of the sample: {counts['unsampled']})"
    )
    print(
        f"  tested             {tested}  (of which inside type annotations, not run: {counts['annotation']}; "
        f"not valid Python, left out: {counts['invalid']}; skipped by pragma {counts['skipped']}; "
        f"incompetent {counts['incompetent']}; pending {counts['pending']})"
    )
    print(f"  killed             {killed}  (only a failed rule, exit 1, kills)")
    print(
        f"  survived           {len(survivors)}  (of which without a verdict, so survivors too: incomplete, "
        f"exit 6: {no_verdict.get(6, 0)}; harness error, exit 7: {no_verdict.get(7, 0)}; "
        f"timeout: {counts['timeout']}; other: {sum(v for k, v in no_verdict.items() if k not in (6, 7))})"
    )
    for verdict in (*VERDICTS, "UNTRIAGED"):
        extra = (
            f"  (of which {counts['annotation']} inside type annotations)"
            if verdict == "equivalent" and counts["annotation"]
            else ""
        )
        print(f"    {verdict:<17}{verdicts[verdict]}{extra}")
    if denominator:
        print(
            f"  score              {killed}/{denominator} = {100 * killed / denominator:.1f}%  "
            "(killed / (tested - equivalent - out-of-contract))"
        )
    if wall is not None:
        print(f"  wall time          {wall / 60:.1f} min on {workers} worker(s)")
    _per_module(mutants, triage)
    if stale and not counts["pending"]:  # with mutants still pending, a missing survivor may just not have run yet
        print(
            f"\n{len(stale)} triage entr{'y' if len(stale) == 1 else 'ies'} match no survivor of this run "
            "(killed now, or the code moved):"
        )
        for key in sorted(stale):
            print(f"  {key[0]} {key[1]}: {key[2]}  ->  {key[3]}")
    if untriaged:
        print(f"\n{len(untriaged)} survivor(s) not triaged in {TRIAGE.name}; stubs to fill in:")
        stubs = [
            {
                "file": m.file,
                "line": m.line,
                "operator": m.operator,
                "original": m.original,
                "mutated": m.mutated,
                "verdict": "needs-probe",
                "reason": "TODO",
            }
            for m in untriaged
        ]
        print(yaml.safe_dump(stubs, sort_keys=False, allow_unicode=True, width=200))
        return 1
    return 0


def _per_module(mutants: list[Mutant], triage: dict[tuple[str, str, str, str], dict[str, Any]]) -> None:
    """The score of each mutated file, counted as the totals are."""
    rows = []
    for file in sorted({m.file for m in mutants}):
        mine = [m for m in mutants if m.file == file]
        kinds = Counter(m.outcome for m in mine)
        verdicts = Counter(
            str((triage.get(m.key()) or {}).get("verdict", "UNTRIAGED"))
            for m in mine
            if m.outcome in ("survived", "timeout")
        )
        tested = kinds["killed"] + kinds["timeout"] + kinds["survived"] + kinds["annotation"]
        equivalent = verdicts["equivalent"] + kinds["annotation"]
        denominator = tested - equivalent - verdicts["out-of-contract"]
        score = f"{kinds['killed']}/{denominator} = {100 * kinds['killed'] / denominator:.1f}%" if denominator else "-"
        rows.append((file, tested, kinds["killed"], equivalent, verdicts["out-of-contract"], score))
    if len(rows) > 1:
        print("\n  per module           tested  killed  equivalent  out-of-contract  score")
        for file, tested, killed, equivalent, outside, score in rows:
            print(f"  {file:<36} {tested:>6}  {killed:>6}  {equivalent:>10}  {outside:>15}  {score}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command")
    kill = sub.add_parser("killer", help="(internal) the test command each mutant is judged by")
    kill.add_argument("--surface", choices=sorted(SURFACES), default="server")
    rep = sub.add_parser("report", help="print the figures of a kept session again")
    rep.add_argument("session", type=Path)
    parser.add_argument("--workers", type=int, default=max(1, min(2, os.cpu_count() or 1)))
    parser.add_argument(
        "--timeout",
        type=float,
        default=120.0,
        help="seconds per mutant before it counts as a timeout (a survivor: no verdict)",
    )
    parser.add_argument(
        "--surface",
        choices=sorted(SURFACES),
        default="server",
        help="server: the Core's contract logic, judged by the whole suite; mcp: the MCP servers and "
        "search_knowledge, judged by the suite's MCP and search_knowledge tests",
    )
    parser.add_argument("--module", action="append", help="mutate only this file (repeatable; default: the surface's)")
    parser.add_argument("--sample", type=int, default=0, help="run only this many mutants per module, drawn at random")
    parser.add_argument("--seed", type=int, default=0, help="the draw of --sample")
    parser.add_argument(
        "--all-operators",
        action="store_true",
        help="also the bitwise/shift/power and is/is-not stand-ins (about 3x longer)",
    )
    parser.add_argument(
        "--resume", action="store_true", help="continue the session kept in --work-dir (only its pending mutants)"
    )
    parser.add_argument(
        "--rerun-survivors", action="store_true", help="with --resume: judge the kept session's survivors again"
    )
    parser.add_argument("--work-dir", help="keep the copies and the session here (default: a temporary folder)")
    args = parser.parse_args(argv)
    if args.command == "killer":
        return killer(args.surface)
    if args.command == "report":
        return report(args.session)
    return run(args)


if __name__ == "__main__":
    raise SystemExit(main())
