"""The worker count of a run that names none: a few for a Core a network away, one otherwise,
decided from the target's address and one TCP handshake (time and the network injected)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from conformance.plugin import workers


class Handshake:
    """A connect that takes ``seconds`` on the injected clock, or fails."""

    def __init__(self, seconds: float, fails: bool = False) -> None:
        self.seconds, self.fails, self.now = seconds, fails, 0.0
        self.calls: list[tuple[str, int]] = []

    def clock(self) -> float:
        return self.now

    def __call__(self, address: tuple[str, int], timeout: float) -> Any:
        self.calls.append(address)
        self.now += self.seconds
        if self.fails:
            raise OSError("refused")
        return self

    def close(self) -> None:
        pass


def _far(url: str, shake: Handshake) -> bool:
    """More than one worker for the Core at ``url``, its handshake ``shake``."""
    return workers.workers_for(workers.handshake_seconds(url, connect=shake, clock=shake.clock)) > 1


@pytest.mark.parametrize(
    "url", ["http://127.0.0.1:8000", "http://localhost:8000", "http://[::1]:8000", "http://127.9.9.9", "sim"]
)
def test_a_core_on_this_machine_is_never_far_and_never_dialled(url: str) -> None:
    shake = Handshake(1.0)
    assert not _far(url, shake) and shake.calls == []


def test_a_slow_handshake_is_far_and_a_quick_one_is_not() -> None:
    slow = Handshake(workers.FAR_SECONDS)
    assert _far("https://core.example:8443/agent", slow) and slow.calls == [("core.example", 8443)]
    assert not _far("http://core.example", Handshake(workers.FAR_SECONDS / 4))
    assert _far("https://core.example", shake := Handshake(0.05)) and shake.calls == [("core.example", 443)]


@pytest.mark.parametrize("url", ["http://core.example:99999", "ftp://core.example", "http://"])
def test_an_address_that_cannot_be_dialled_is_not_far(url: str) -> None:
    assert not _far(url, Handshake(1.0))


def test_an_unreachable_core_runs_serially() -> None:
    assert not _far("http://core.example", Handshake(1.0, fails=True))


def test_the_default_is_four_for_a_far_core_eight_a_region_away_twelve_an_ocean_away_and_one_otherwise(
    tmp_path: Path,
) -> None:
    live = tmp_path / "target.toml"
    live.write_text('[control]\nurl = "http://core.example/_control/v1"\ntoken = "t"\n', "utf-8")

    def chosen(target: str, shake: Handshake, config: str | None = str(live)) -> int:
        return workers.default_workers(config, target, connect=shake, clock=shake.clock)

    assert chosen("sim", Handshake(1.0)) == 1
    assert chosen("http://127.0.0.1:9", Handshake(1.0)) == 1
    assert chosen("http://core.example", Handshake(1.0)) == workers.FARTHEST_WORKERS == 12
    assert chosen("http://core.example", Handshake(workers.FARTHEST_SECONDS)) == workers.FARTHEST_WORKERS
    assert chosen("http://core.example", Handshake(workers.FARTHEST_SECONDS * 0.99)) == workers.FARTHER_WORKERS == 8
    assert chosen("http://core.example", Handshake(workers.FARTHER_SECONDS)) == workers.FARTHER_WORKERS
    assert chosen("http://core.example", Handshake(workers.FARTHER_SECONDS / 2)) == workers.AUTO_WORKERS
    assert chosen("http://core.example", Handshake(workers.FAR_SECONDS)) == workers.AUTO_WORKERS
    assert chosen("http://core.example", Handshake(workers.FAR_SECONDS / 2)) == 1
    assert chosen("http://core.example", Handshake(0.0)) == 1
    assert chosen("http://core.example", Handshake(1.0, fails=True)) == 1  # unreachable: the preflight says why
    assert chosen("http://core.example", Handshake(1.0), str(tmp_path / "missing.toml")) == 1


def test_forked_workers_are_handed_the_mcp_sdk_only_where_the_run_opens_mcp_sessions(tmp_path: Path) -> None:
    """The warm server imports the MCP SDK's client for the workers of a run that will open MCP
    sessions, and the bundled simulator's libraries where each worker serves one; a run with no MCP
    server imports no MCP SDK anywhere, its warm server included."""
    from conformance.plugin import warm

    plain = tmp_path / "plain.toml"
    plain.write_text('[control]\nurl = "http://core.example/_control/v1"\ntoken = "t"\n', "utf-8")
    served = tmp_path / "mcp.toml"
    served.write_text(plain.read_text("utf-8") + '[mcp]\nurl = "http://core.example/mcp"\n', "utf-8")
    live = "http://core.example"
    assert workers.preloads(str(plain), live, None) == ()
    assert workers.preloads(str(served), live, None) == warm.MCP_PRELOAD
    assert workers.preloads(str(served), live, "none") == ()
    assert workers.preloads(str(plain), live, "http://core.example/mcp") == warm.MCP_PRELOAD
    assert workers.preloads(None, None, None) == (*warm.MCP_PRELOAD, *warm.BUNDLED_PRELOAD)
    assert workers.preloads(None, None, "none") == warm.BUNDLED_PRELOAD
    assert workers.preloads(str(tmp_path / "missing.toml"), live, None) == ()  # the preflight says why
    assert not any(name.split(".")[0] == "mcp" for name in warm.PRELOAD)


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({"XDG_CACHE_HOME": "/var/cache/me", "HOME": "/home/me"}, "/var/cache/me/knowledge-conformance/hypothesis"),
        ({"XDG_CACHE_HOME": "relative", "HOME": "/home/me"}, "/home/me/.cache/knowledge-conformance/hypothesis"),
        ({"HOME": "/home/me"}, "/home/me/.cache/knowledge-conformance/hypothesis"),
        ({"HOME": "/home/me", "HYPOTHESIS_STORAGE_DIRECTORY": "/elsewhere"}, None),
        ({"HOME": ""}, None),  # Python makes "/" of an empty HOME: no folder at the root (found by review)
        ({"HOME": "", "XDG_CACHE_HOME": "/var/cache/me"}, "/var/cache/me/knowledge-conformance/hypothesis"),
    ],
)
def test_hypothesis_keeps_its_tables_in_the_user_cache_never_in_the_run_folder(
    environ: dict[str, str], expected: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An absolute cache folder or none: a relative XDG_CACHE_HOME is ignored (as the XDG spec
    says), the user's own HYPOTHESIS_STORAGE_DIRECTORY wins."""
    from conformance.plugin.hypothesis_home import cache_folder

    for name in ("HOME", "XDG_CACHE_HOME", "HYPOTHESIS_STORAGE_DIRECTORY"):
        monkeypatch.delenv(name, raising=False)
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    found = cache_folder(environ)
    if expected == "absolute":
        assert found is None or found.is_absolute()
    else:
        assert (None if found is None else str(found)) == expected
