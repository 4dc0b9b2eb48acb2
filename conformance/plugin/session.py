"""The hooks of a suite session (registered by ``conformance.plugin`` only in a session that asked
for the suite): claims checked at collection, one ledger per test, results kept per phase, the
reports and the verdict at the end; and the xdist controller that sums what workers counted."""

from __future__ import annotations

import datetime as dt
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from conformance import __version__
from conformance.common.outcomes import NotVerified
from conformance.common.rules import recording
from conformance.common.secrets import SECRETS, clip, scrub
from conformance.common.untrusted import shown
from conformance.plugin.claims import TestClaims, broke, scrubbed
from conformance.plugin.options import option
from conformance.plugin.preflight import PREFLIGHT, check_control, check_harness_core, usage_error
from conformance.plugin.state import LEDGER, MARKER, STATE, is_worker
from conformance.report.incomplete import first_reason

if TYPE_CHECKING:
    from conformance.common.transport import Recorder

SUITE_FLAG = "KNOWLEDGE_CONFORMANCE_SUITE"  # a package that sets it to True holds suite tests


def _ids(item: pytest.Item) -> list[str]:
    return list(dict.fromkeys(rid for mark in item.iter_markers(MARKER) for rid in mark.args))


def _unclaimed(items: list[pytest.Item]) -> list[str]:
    """``ID (test)`` for each rule a test's own code names that none of its marks claims (a
    parametrized test: any of its cases' marks); its passes would verify nothing, unseen."""
    from conformance.common.rules import named_in

    claims: dict[Any, tuple[str, set[str]]] = {}
    for item in items:
        function = getattr(item, "function", None)
        if function is not None:
            claims.setdefault(function, (item.nodeid.split("[", 1)[0], set()))[1].update(_ids(item))
    return sorted(f"{rid} ({nodeid})" for f, (nodeid, claimed) in claims.items() for rid in named_in(f) - claimed)


def _in_suite(item: pytest.Item) -> bool:
    import sys

    module = getattr(item, "module", None)
    package = sys.modules.get(getattr(module, "__package__", None) or "")
    return bool(getattr(package, SUITE_FLAG, False))


def _stable_nodeid(item: pytest.Item) -> str:
    """The test's ID from its module name: the same in a serial run, under xdist and from any rootdir."""
    module = getattr(item, "module", None)
    _, _, rest = item.nodeid.partition("::")
    return f"{module.__name__.replace('.', '/')}.py::{rest}" if module is not None and rest else item.nodeid


class SuiteSession:
    """The hooks of a suite session: claims checked at collection, results kept per phase,
    reports and the verdict at the end."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.state = config.stash[STATE]

    # ------------------------------------------------------------- start
    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionstart(self, session: pytest.Session) -> None:
        cfg = self.state.config
        if option(self.config, "--harness") is not None:
            if not (is_worker(self.config) or self.config.option.collectonly):
                check_harness_core(self.config)
            return
        if is_worker(self.config) or self.config.option.collectonly or cfg.is_sim:
            return
        from conformance.plugin.identities import check_live_target, check_mcp_url

        check_live_target(cfg, self.state.settings)  # the base URL, then every configured identity on its route
        if cfg.control_url is not None and cfg.control_token is not None:
            check_control(cfg)
        check_mcp_url(cfg, option(self.config, "--mcp-target"))

    def pytest_keyboard_interrupt(self, excinfo: pytest.ExceptionInfo[BaseException]) -> None:
        """Ctrl-C is always the verdict ``interrupted`` (exit 2), whatever failed or errored before it."""
        if isinstance(excinfo.value, KeyboardInterrupt) and not isinstance(excinfo.value, pytest.Session.Interrupted):
            self.state.keyboard_interrupted = True  # not a stop the run asked for itself (session.shouldstop)

    def pytest_report_header(self, config: pytest.Config) -> list[str]:
        cfg, settings = self.state.config, self.state.settings
        quirks = f" quirks={','.join(settings.sim_quirks)}" if settings.sim_quirks else ""
        from conformance.common.open import describe
        from conformance.mcp.endpoints import planned_surfaces
        from conformance.report.results import surfaces_line

        harness = option(config, "--harness")
        if harness is not None:
            core = option(config, "--harness-core") or "a served bundled simulator"
            return [
                f"knowledge-conformance {__version__}: client harness={scrub(harness)} core={scrub(core)} run_id={settings.run_id}"
            ]
        surfaces = surfaces_line(planned_surfaces(cfg, option(config, "--mcp-target")))
        return [
            f"knowledge-conformance {__version__}: target={describe(cfg)} run_id={settings.run_id}{quirks}",
            f"surfaces: {surfaces}",
        ]

    def pytest_collection_modifyitems(
        self, session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
    ) -> None:
        from knowledge_schemas import load_catalogue

        catalogue = load_catalogue()
        suite = [i for i in items if _in_suite(i)]
        untagged = [i.nodeid for i in suite if not _ids(i)]
        if untagged:
            usage_error(
                f"suite tests without a requirement ID (every test must name what it verifies): {', '.join(untagged[:5])}"
            )
        unknown = {i.nodeid: [rid for rid in _ids(i) if rid not in catalogue] for i in suite}
        named = sorted(f"{rid} ({nodeid})" for nodeid, rids in unknown.items() for rid in rids)
        if named:
            usage_error(f"tests name requirement IDs missing from the catalogue: {', '.join(named[:5])}")
        unclaimed = _unclaimed(suite)
        if unclaimed:
            usage_error(f"tests check rules their requirement marks do not claim: {', '.join(unclaimed[:5])}")
        wanted = set(option(config, "--requirement"))
        if wanted:
            keep = [i for i in items if wanted & set(_ids(i))]
            config.hook.pytest_deselected(items=[i for i in items if i not in keep])
            items[:] = keep

    # ------------------------------------------------------------- tests
    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        from conformance.mcp import evidence

        evidence.clear()
        recorder = self.state.recorder
        if recorder is not None:
            recorder.current = []

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Iterator[None]:
        """One ledger per test: the rules whose checks pass while the test body runs."""
        with recording() as ledger:
            item.stash[LEDGER] = ledger
            return (yield)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
        outcome: Any = yield
        report = outcome.get_result()
        if call.excinfo is not None and report.failed:
            self._bound_transport_failure(item, report, call.excinfo.value)
        if call.excinfo is not None and isinstance(call.excinfo.value, NotVerified):
            # The library's "not verified" is pytest's skip: reported with its reason, nothing verified.
            report.outcome = "skipped"
            report.longrepr = (str(item.path), item.location[1] or 0, f"Skipped: {call.excinfo.value.reason}")
        claims = self._claims(item, call, report)
        if claims is not None:
            claims.put(report)
        self._scrub_report(report)

    def _claims(self, item: pytest.Item, call: pytest.CallInfo[None], report: pytest.TestReport) -> TestClaims | None:
        """What this phase of the test claimed, checked and broke (None: a test outside the suite, serially)."""
        claims = TestClaims(nodeid=_stable_nodeid(item), requirements=_ids(item)) if _in_suite(item) else None
        if report.when == "teardown" and is_worker(self.config) and self.state.recorder is not None:
            # The worker's running total rides on every test: an interrupted run's workers never report at the end.
            claims = claims or TestClaims()
            claims.worker_requests = self.state.recorder.requests
        if claims is None or claims.nodeid is None:
            return claims
        ledger = item.stash.get(LEDGER, None)
        if report.when == "call" and ledger is not None:
            # What the test verifies follows from the checks that passed in it (conformance.common.rules).
            claims.exercised = sorted(ledger.passed)
        probes = item.funcargs.get("expiry_probes") if report.when == "call" and hasattr(item, "funcargs") else None
        if probes is not None and probes.timings:  # the intervals this test's expiry probes were judged on
            claims.timings, probes.timings = probes.timings, []
        if report.failed:
            broke(claims, report, call.excinfo.value if call.excinfo is not None else None, ledger, self.state)
        return claims

    @staticmethod
    def _bound_transport_failure(item: pytest.Item, report: pytest.TestReport, exc: BaseException) -> None:
        """A request that timed out is one line, not a traceback through the HTTP stack; once
        the watchdog has tripped (conformance.common.transport) the run stops after this test."""
        import httpx

        from conformance.common.transport import TargetUnresponsive

        if isinstance(exc, TargetUnresponsive):
            item.session.shouldstop = f"harness error: {exc}"
        if isinstance(exc, (TargetUnresponsive, httpx.TimeoutException)):
            request = getattr(exc, "_request", None)
            where = f" ({request.method} {request.url.path})" if request is not None else ""
            report.longrepr = scrub(f"{type(exc).__name__}: {exc}{where}")

    @staticmethod
    def _scrub_report(report: pytest.TestReport) -> None:
        """Tracebacks (``--tb=long`` shows locals and source), captured output and
        properties leave the process only scrubbed: the terminal, JUnit and xdist all read them.
        What the terminal prints is also defanged (conformance.common.untrusted); properties
        stay data and are defanged where a writer shows them."""
        if report.longrepr is not None and (report.failed or report.skipped):
            if isinstance(report.longrepr, tuple) and len(report.longrepr) == 3:
                path, line, reason = report.longrepr
                report.longrepr = (path, line, shown(reason))
            else:
                text = report.longreprtext
                clean = shown(text)
                if clean != text:
                    report.longrepr = clean
        report.sections = [(title, shown(content)) for title, content in report.sections]
        if SECRETS:
            report.user_properties = [(k, scrubbed(k, v)) for k, v in report.user_properties]

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        from conformance.report.results import TestResult

        claims = TestClaims.of(report)
        if claims is not None and claims.worker_requests is not None and not is_worker(self.config):
            worker = str(getattr(report, "worker_id", "?"))  # set by pytest-xdist on every report a worker sends
            seen = self.state.worker_requests
            seen[worker] = max(seen.get(worker, 0), claims.worker_requests)
        relevant = (
            report.when == "call"
            or (report.when == "setup" and not report.passed)
            or (report.when == "teardown" and report.failed)
        )
        if not relevant:
            return
        if claims is None or claims.nodeid is None:
            if report.failed:  # a crashed worker, or a test outside the suite that ran in its session
                self.state.pending.append(
                    TestResult(
                        nodeid=report.nodeid,
                        outcome="error",
                        requirements=[],
                        message=scrub(
                            f"failed outside the suite's requirement bookkeeping: {(report.longreprtext.strip().splitlines() or ['?'])[-1]}"
                        )[:2000],
                        detail=clip(report.longreprtext, -4000),
                    )
                )
            return
        self.state.pending.append(claims.result(report))

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.failed:
            from conformance.report.results import TestResult

            text = scrub(report.longreprtext)
            self.state.pending.append(
                TestResult(
                    nodeid=report.nodeid or "<collection>",
                    outcome="error",
                    requirements=[],
                    message=f"collection error: {(text.strip().splitlines() or ['?'])[-1]}"[:2000],
                    detail=text[-4000:],
                )
            )

    # ------------------------------------------------------------- end
    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        config = self.config
        state = self.state
        recorder = state.recorder
        if is_worker(config):
            config.workeroutput["kc_requests"] = recorder.requests if recorder else 0  # type: ignore[attr-defined]
            config.workeroutput["kc_refusals"] = _refusals(recorder)  # type: ignore[attr-defined]
            config.workeroutput["kc_kept"] = state.kept_workspaces  # type: ignore[attr-defined]
            return
        if config.option.collectonly or exitstatus == pytest.ExitCode.USAGE_ERROR:
            return
        try:
            self._judge(session, exitstatus)
        except Exception as exc:  # a verdict the suite could not build is its own fault, never exit 1
            import traceback

            from conformance.common.exits import Exit

            self.state.write_error = scrub(f"could not build the reports: {type(exc).__name__}: {exc}")
            print(scrub(traceback.format_exc()), file=sys.stderr)
            session.exitstatus = Exit.INTERNAL_ERROR

    def _judge(self, session: pytest.Session, exitstatus: int) -> None:
        """The run's verdict and its reports, from every test's claims and the workers' counts."""
        config = self.config
        state = self.state
        recorder = state.recorder
        from conformance.clients.scope import UNSHOWABLE
        from conformance.common.exits import VERDICT_EXIT
        from conformance.common.open import describe
        from conformance.common.scope import parse_scope
        from conformance.mcp.endpoints import planned_surfaces
        from conformance.report.results import RunInfo, aggregate
        from conformance.report.writers import write_all
        from knowledge_schemas import load_catalogue
        from knowledge_schemas.catalogue import catalogue_version

        pending = state.pending
        errored = any(t.outcome == "error" for t in pending)
        cfg = state.config
        client = state.client  # a client run: what the harness said it wraps (conformance.plugin.client_fixtures)
        info = RunInfo(
            suite_version=__version__,
            catalogue_version=catalogue_version(),
            target=client.target
            if client
            else describe(cfg)
            if option(config, "--harness") is None
            else f"client harness {option(config, '--harness')} (it did not start)",
            configuration=self._configuration(),
            hypothesis=_hypothesis(config),
            started=dt.datetime.fromtimestamp(state.started, dt.UTC).isoformat(timespec="seconds"),
            duration_seconds=time.time() - state.started,
            requests=sum(state.worker_requests.values()) + (recorder.requests if recorder else 0) + PREFLIGHT.requests,
            fail_on=option(config, "--fail-on"),
            run_id=state.settings.run_id,
            interrupted=state.keyboard_interrupted or (exitstatus == pytest.ExitCode.INTERRUPTED and not errored),
            surfaces=tuple(
                client.surfaces
                if client
                else planned_surfaces(cfg, option(config, "--mcp-target"))
                if option(config, "--harness") is None
                else _unstarted_client()
            ),
            gate=client.gate if client else None if option(config, "--harness") is None else (),
            scope=None if state.settings.scope is None or client else parse_scope(state.settings.scope),
        )
        run = aggregate(
            load_catalogue(),
            list(pending),
            info,
            waivers=state.waivers,
            today=dt.date.today(),
            reasons=UNSHOWABLE,
        )
        refused = [_refusals(recorder), (PREFLIGHT.refusals, PREFLIGHT.paused), *state.worker_refusals.values()]
        if sum(n for n, _ in refused):
            run.warnings.append(
                f"the target answered {sum(n for n, _ in refused)} request(s) with 429 (Too Many Requests); the suite "
                f"held its requests {sum(s for _, s in refused):.1f} s for them (summed over its processes) and sent "
                "them again; a check whose request was still refused is not verified, as the seeds name no rate "
                "limit: --rate-limit or a lower --concurrency spares the Core"
            )
        kept = state.kept_workspaces
        if kept:
            run.warnings.append(
                f"the control extension kept {len(kept)} workspace(s) of run {run.run_id} (no delete): {', '.join(sorted(kept)[:5])}"
            )
        try:
            # The run's data was masked with every secret as it was gathered; the files' own text
            # (nodeids, verdicts, attributes) only with the secrets the run was given (RunSecrets).
            state.paths = write_all(run, Path(option(config, "--reports")), SECRETS.configured.text)
        except OSError as exc:
            state.write_error = f"could not write the reports: {exc}"
            session.exitstatus = VERDICT_EXIT["error"]
            state.run = run
            return
        state.run = run
        if (
            exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED, pytest.ExitCode.NO_TESTS_COLLECTED)
            or errored
            or run.verdict == "interrupted"
        ):
            session.exitstatus = VERDICT_EXIT[run.verdict]

    def _configuration(self) -> dict[str, Any]:
        """The run's settings, as a reader needs them to reproduce it; never a secret."""
        config, cfg = self.config, self.state.config
        options = {
            name: option(config, name)
            for name in (
                "--no-control",
                "--realtime",
                "--rate-limit",
                "--deep",
                "--no-shrink",
                "--stateful-examples",
                "--stateful-steps",
                "--stateful-seed",
                "--requirement",
                "--sim-quirk",
                "--mcp-target",
                "--sim-seed",
                "--sim-clock-tick",
                "--waivers",
            )
        }
        if option(config, "--harness") is not None:  # a client run: its own settings
            options.update(
                {name: option(config, name) for name in ("--harness", "--harness-core", "--harness-timeout")}
            )
        out: dict[str, Any] = {name.lstrip("-").replace("-", "_"): value for name, value in options.items()}
        out["target_config"] = option(config, "--target-config")
        out["control_available"] = bool(cfg.is_sim or (cfg.control_url and cfg.control_token))
        out["strict_codes"] = cfg.strict_codes
        out["clock_skew_seconds"] = cfg.clock_skew_seconds
        out["wire"] = cfg.wire
        out["identities"] = sorted(cfg.identities)
        out["workers"] = len(self.state.worker_requests)  # the workers that ran and reported (0: serial)
        return dict(SECRETS.data(out))

    def pytest_terminal_summary(self, terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
        if self.state.write_error is not None:
            terminalreporter.write_line(f"VERDICT: ERROR  ({shown(self.state.write_error)})")
            return
        run = self.state.run
        if run is None:
            return
        s = run.summary
        terminalreporter.section("knowledge contract verdict")
        scope = run.declared_scope
        within = (
            f" within scope {scope['label']}: {scope['must_verified']} of {scope['must_total']} MUSTs of the scope "
            f"verified; {len(scope['outside'])} outside it ({', '.join(scope['outside']) or 'none'})"
            if scope
            else ""
        )
        terminalreporter.write_line(
            SECRETS.configured.text(
                f"VERDICT: {run.verdict.upper()}{within}  (surfaces: {run.surfaces_line}; {'client/host' if run.is_client_run else 'server'} MUSTs verified {s.get('client_must_verified', s['server_must_verified'])}/{s.get('client_must_total', s['server_must_total'])}{run.other_musts_line}; "
                f"requirements verified {s['verified']}, failed {s['failed']}, waived {s['waived']}, not verified {s['not_verified']}; "
                f"tests failed {s['tests_failed']}, harness errors {s['tests_errored']}; {run.requests} requests; run {run.run_id})"
            )
        )
        for r in run.requirements:  # only the reason is a target's text: a minted token masks nothing else
            if r.status in ("failed", "waived"):
                terminalreporter.write_line(f"  {r.status.upper():7} {r.id} {r.title}: {shown(clip(r.reason, 160))}")
        incomplete = run.incomplete or {}
        for m in incomplete.get("missing", []):
            reason = shown(clip(first_reason(m["reason"]), 120))
            terminalreporter.write_line(f"  NOT VERIFIED {m['id']}: {reason}; to verify: {m['to_verify']}")
        if incomplete.get("scope"):
            label = incomplete["scope"]
            terminalreporter.write_line(f"  this run verifies every MUST of scope {label}: --scope {label} gates on it")
        for w in run.warnings:
            terminalreporter.write_line(shown(f"  warning: {clip(w, 300)}"))
        for kind, path in self.state.paths.items():
            terminalreporter.write_line(f"  {kind:8} {path}")


def _unstarted_client() -> tuple[dict[str, Any], ...]:
    return ({"surface": "client", "label": "client harness", "checked": False, "detail": "the harness did not start"},)


class XdistController:
    """pytest-xdist, main process: hand each worker the run ID and how tests are dealt, sum what workers counted."""

    def __init__(self, config: pytest.Config) -> None:
        self.state, self.config = config.stash[STATE], config

    def pytest_configure_node(self, node: Any) -> None:
        node.workerinput["kc_run_id"] = self.state.settings.run_id
        node.workerinput["kc_dist"] = str(self.config.option.dist)  # a worker's own option says "no"

    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        output = getattr(node, "workeroutput", {}) or {}
        if "kc_requests" in output:
            seen = self.state.worker_requests
            seen[str(node.gateway.id)] = max(seen.get(str(node.gateway.id), 0), int(output["kc_requests"]))
        self.state.kept_workspaces.extend(output.get("kc_kept", []))
        refusals, paused = output.get("kc_refusals", (0, 0.0))
        self.state.worker_refusals[str(node.gateway.id)] = (int(refusals), float(paused))


def _refusals(recorder: Recorder | None) -> tuple[int, float]:
    """The 429s this process's requests met, and the seconds it paused for them."""
    return (recorder.limiter.refusals, recorder.limiter.paused) if recorder is not None else (0, 0.0)


def _hypothesis(config: pytest.Config) -> dict[str, Any]:
    """Generated tests are derandomized: the same suite version and target replay the same cases."""
    seed = config.getoption("hypothesis_seed", None)
    return {"derandomize": True, "seed": None if seed is None else str(seed)}
