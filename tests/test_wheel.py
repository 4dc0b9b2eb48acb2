"""The wheel as users install it: built from the sources, installed (with its dependencies)
into a fresh virtual environment, and run from there, outside the checkout, with the
environment's own executables, so nothing comes from the source tree.

Built and installed once per session (module-scoped fixtures; pip's cache keeps the install
to about a minute). Every subprocess has a timeout; the served simulator is stopped in a
``finally``.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import socket
import subprocess
import sys
import time
import tomllib
import zipfile
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parent.parent
BUILD_TIMEOUT = 300
INSTALL_TIMEOUT = 900
RUN_TIMEOUT = 600
SERVE_TIMEOUT = 60


@dataclass(frozen=True)
class Installed:
    venv: Path
    python: Path
    bin: Path
    env: dict[str, str]


def _clean_env() -> dict[str, str]:
    """The environment without anything that would point Python at the checkout."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return env


def _setuptools() -> dict[str, object]:
    table: dict[str, object] = tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))["tool"]["setuptools"]
    return table


def _source_files() -> dict[str, Path]:
    """Every file a wheel must hold, by its path in the wheel: the code packages as they are,
    the contract's data folder under the package it is mapped to (package-dir)."""
    package_dir = _setuptools()["package-dir"]
    assert isinstance(package_dir, dict)
    roots = {top: top for top in ("conformance", "simulator", "knowledge_schemas")}
    roots |= {folder: package.replace(".", "/") for package, folder in package_dir.items()}
    out: dict[str, Path] = {}
    for folder, inside in roots.items():
        for path in (ROOT / folder).rglob("*"):
            parts = path.relative_to(ROOT / folder).parts
            if path.is_file() and path.suffix != ".pyc" and not any(p == "__pycache__" or p[0] == "." for p in parts):
                out["/".join((inside, *parts))] = path
    return out


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel, built from a copy of the sources (a build in the checkout would reuse a stale
    ``build/`` folder, which can carry files the tree no longer has)."""
    base = tmp_path_factory.mktemp("wheel")
    source = base / "source"
    source.mkdir()
    package_dir = _setuptools()["package-dir"]
    assert isinstance(package_dir, dict)
    for folder in ("conformance", "simulator", "knowledge_schemas", *package_dir.values()):
        shutil.copytree(ROOT / folder, source / folder, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, source / name)
    out = base / "dist"
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", str(source), "-w", str(out)],
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT,
        cwd=base,
        env=_clean_env(),
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (built,) = out.glob("*.whl")
    return built


@pytest.fixture(scope="module")
def installed(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Installed:
    """A fresh virtual environment with the wheel and its dependencies (no extras)."""
    venv = tmp_path_factory.mktemp("venv") / "env"
    env = _clean_env()
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120, env=env)
    bin_dir = venv / ("Scripts" if os.name == "nt" else "bin")
    python = bin_dir / ("python.exe" if os.name == "nt" else "python")
    proc = subprocess.run(
        [str(python), "-m", "pip", "install", "-q", str(wheel)],
        capture_output=True,
        text=True,
        timeout=INSTALL_TIMEOUT,
        cwd=venv,
        env=env,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    env["PATH"] = os.pathsep.join([str(bin_dir), env.get("PATH", "")])
    return Installed(venv, python, bin_dir, env)


def test_the_wheel_holds_every_file_of_the_packages_and_the_contract(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        held = {n for n in archive.namelist() if not n.split("/")[0].endswith(".dist-info")}
    expected = set(_source_files())
    assert sorted(expected - held) == [], "files of the tree missing from the wheel (package-data?)"
    assert sorted(held - expected) == [], "files in the wheel that the tree does not have"
    assert {"simulator/demo/handbook/onboarding.md", "knowledge_schemas/schemas/requirements.yaml"} <= held


def test_the_installed_packages_and_contract_come_from_the_environment(installed: Installed, tmp_path: Path) -> None:
    code = (
        "import json, conformance, simulator, knowledge_schemas as k;"
        "print(json.dumps([conformance.__file__, simulator.__file__, k.__file__, str(k.SCHEMA_DIR),"
        " len(k.schema_names()), len(k.load_catalogue().requirements)]))"
    )
    proc = subprocess.run(
        [str(installed.python), "-c", code],
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
        cwd=tmp_path,
        env=installed.env,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    *files, schema_dir, schemas, requirements = json.loads(proc.stdout)
    venv = installed.venv.resolve()
    for path in (*files, schema_dir):
        assert venv in Path(path).resolve().parents, path
    assert Path(schema_dir).name == "schemas" and Path(schema_dir).parent.name == "knowledge_schemas"
    assert schemas == len(list((ROOT / "schemas").glob("*.schema.json"))) and requirements > 0


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _demo_token(banner: str) -> str | None:
    for line in banner.splitlines():
        if line.strip().startswith("primary: route demo:"):  # the banner labels each token with its role
            return line.rsplit(": ", 1)[1].strip()
    return None


def test_knowledge_sim_serve_answers_with_the_demo_workspace(installed: Installed, tmp_path: Path) -> None:
    port = _free_port()
    base = f"http://127.0.0.1:{port}/agent-api/v1/workspaces/demo"
    log = tmp_path / "serve.log"
    with log.open("w") as err:
        proc = subprocess.Popen(
            [str(installed.bin / "knowledge-sim"), "serve", "--port", str(port), "--seed", "1"],
            stdout=subprocess.DEVNULL,
            stderr=err,
            cwd=tmp_path,
            env=installed.env,
        )
        try:
            deadline = time.monotonic() + SERVE_TIMEOUT
            capabilities: httpx.Response | None = None
            while capabilities is None:
                assert proc.poll() is None, f"knowledge-sim serve exited {proc.returncode}: {log.read_text()}"
                assert time.monotonic() < deadline, f"knowledge-sim serve did not answer: {log.read_text()}"
                token = _demo_token(log.read_text())
                if token is not None:
                    try:
                        capabilities = httpx.get(
                            f"{base}/knowledge/capabilities", headers={"Authorization": f"Bearer {token}"}, timeout=5
                        )
                    except httpx.TransportError:
                        pass
                if capabilities is None:
                    time.sleep(0.2)
            assert capabilities.status_code == 200, capabilities.text
            assert capabilities.json()["enabled"] is True
            # the demo documents are shipped: a search finds one of them
            auth = {"Authorization": f"Bearer {token}"}
            turn = {"client_conversation_id": "c", "client_turn_id": "t", "user_message_id": "m", "user_input": "x"}
            run = httpx.post(f"{base}/turns", json=turn, headers=auth, timeout=10).json()["run_id"]
            found = httpx.post(
                f"{base}/knowledge/search", json={"query": "onboarding", "run_id": run}, headers=auth, timeout=10
            )
            assert found.status_code == 200 and found.json()["hints"], found.text
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=15)


def test_knowledge_conformance_run_is_conformant(installed: Installed, tmp_path: Path) -> None:
    reports = tmp_path / "reports"
    proc = subprocess.run(
        [str(installed.bin / "knowledge-conformance"), "run", "--reports", str(reports)],
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
        cwd=tmp_path,
        env=installed.env,
        check=False,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    assert "VERDICT: CONFORMANT" in out, out[-4000:]
    assert json.loads((reports / "results.json").read_text("utf-8"))["verdict"] == "conformant"
    assert {"report.md", "report.html", "junit.xml"} <= {p.name for p in reports.iterdir()}


def test_knowledge_conformance_client_passes_the_reference_client(installed: Installed, tmp_path: Path) -> None:
    reports = tmp_path / "reports"
    harness = f"{shlex.quote(str(installed.python))} -m conformance.clients.reference"
    proc = subprocess.run(
        [str(installed.bin / "knowledge-conformance"), "client", "--harness", harness, "--reports", str(reports)],
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
        cwd=tmp_path,
        env=installed.env,
        check=False,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    assert json.loads((reports / "results.json").read_text("utf-8"))["verdict"] == "conformant"
