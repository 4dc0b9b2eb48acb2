"""HTTP adapter (standard library only) and command line."""
from __future__ import annotations

import argparse
import os
import sys
import threading
import traceback
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable

from . import mcp_http
from .core import AGENT_BODY_LIMIT, CONTROL_BODY_LIMIT, Core, dumps_agent

NO_BODY_STATUSES = {204, 304}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Headers and body leave in two writes: without TCP_NODELAY the body waits for the client's
    # delayed ACK (some 40 ms a request on Linux).
    disable_nagle_algorithm = True
    server_version = "blindcore"
    sys_version = ""
    core: Core  # set by make_server

    def log_message(self, format: str, *args: Any) -> None:  # quiet unless asked
        if getattr(self.server, "verbose", False):
            super().log_message(format, *args)

    # Every method, known or not, goes through _dispatch.
    def __getattr__(self, name: str) -> Callable[[], None]:
        if name.startswith("do_"):
            return self._dispatch
        raise AttributeError(name)

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        # Malformed request lines etc.: a JSON envelope, never HTML.
        body = dumps_agent({"error": "invalid_request" if code < 500 else "internal_error"})
        try:
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Cache-Control", "no-store")
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Connection", "close")
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)
        except OSError:
            pass
        self.close_connection = True

    def _read_body(self, limit: int) -> bytes | None:
        te = (self.headers.get("Transfer-Encoding") or "").lower()
        if "chunked" in te:
            chunks, total = [], 0
            while True:
                line = self.rfile.readline(65537)
                size = int(line.split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline(65537) not in (b"\r\n", b"\n", b""):
                        pass
                    break
                total += size
                if total > limit:
                    return None
                chunks.append(self.rfile.read(size))
                self.rfile.readline(65537)
            return b"".join(chunks)
        length = self.headers.get("Content-Length")
        if not length:
            return b""
        n = int(length)
        if n < 0:
            raise ValueError("negative length")
        if n > limit:
            return None
        return self.rfile.read(n)

    def _dispatch(self) -> None:
        path = self.path
        limit = CONTROL_BODY_LIMIT if path.startswith("/_control/") else AGENT_BODY_LIMIT
        try:
            raw = self._read_body(limit)
        except (ValueError, OSError):
            self.send_error(400)
            return
        if raw is None:  # over the limit: answer 413 without reading the rest
            self.close_connection = True
            self._send(413, {}, dumps_agent({"error": "payload_too_large"}))
            return
        headers = {k.lower(): v for k, v in self.headers.items()}
        host = headers.get("host") or "%s:%s" % self.server.server_address[:2]
        try:
            mcp_route = mcp_http.match(path)
            if mcp_route is not None:
                # The MCP adapter is not the Core: it holds no Core lock and calls the
                # Core's Agent API over loopback HTTP like any adapter in front of it.
                endpoint: mcp_http.McpHttpEndpoint = self.server.mcp_endpoint  # type: ignore[attr-defined]
                status, extra, data = endpoint.handle(self.command, mcp_route, headers, raw)
            else:
                status, extra, data = self.core.handle(self.command, path, headers, raw, host=host)
        except Exception:  # an unexpected failure is a 500 envelope
            traceback.print_exc()
            status, extra, data = 500, {}, dumps_agent({"error": "internal_error"})
        self._send(status, extra, data)

    def _send(self, status: int, extra: dict[str, str], data: bytes) -> None:
        self.send_response(status)
        self.send_header("Cache-Control", "no-store")
        for k, v in extra.items():
            self.send_header(k, v)
        if status in NO_BODY_STATUSES:
            data = b""
        elif data:
            self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        if self.command != "HEAD" and data:
            self.wfile.write(data)


class Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    verbose: bool = False
    mcp_endpoint: mcp_http.McpHttpEndpoint


def loopback_url(address: tuple[Any, ...]) -> str:
    host, port = str(address[0]), int(address[1])
    if host in ("0.0.0.0", ""):
        host = "127.0.0.1"
    elif host == "::":
        host = "::1"
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def make_server(host: str, port: int, core: Core, verbose: bool = False,
                mcp_core_url: str | None = None, allowed_origins: tuple[str, ...] = ()) -> Server:
    handler = type("BoundHandler", (Handler,), {"core": core})
    srv = Server((host, port), handler)
    srv.verbose = verbose
    srv.mcp_endpoint = mcp_http.McpHttpEndpoint.for_core(
        mcp_core_url or loopback_url(srv.server_address), allowed_origins)
    return srv


def serve_in_thread(core: Core, host: str = "127.0.0.1", port: int = 0,
                    **kwargs: Any) -> tuple[Server, threading.Thread]:
    srv = make_server(host, port, core, **kwargs)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    return srv, t


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m blindcore")
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("serve", help="run the Core (Agent API, control, Agent Session MCP over HTTP)")
    s.add_argument("--host", default="127.0.0.1")
    s.add_argument("--port", type=int, default=8765)
    s.add_argument("--clock", choices=["frozen", "real"], default="frozen",
                   help="frozen: time moves only through the control clock (default); "
                        "real: it also follows wall time (for --realtime runs)")
    s.add_argument("--hub-url", default=None, help="Hub base URL of minted identities "
                   "(default: http://<Host header of the control request>)")
    s.add_argument("--mcp-core-url", default=None,
                   help="where the MCP adapter reaches the Core (default: this server over loopback)")
    s.add_argument("--mcp-allow-origin", action="append", default=[],
                   help="an extra Origin the MCP endpoint accepts (loopback origins always are)")
    s.add_argument("--verbose", action="store_true")
    m = sub.add_parser("mcp", help="Agent Session MCP over stdio (token from KC_AGENT_TOKEN)")
    m.add_argument("--core-url", required=True)
    m.add_argument("--route", default=None,
                   help="the workspace route (default: KC_ROUTE, else the token's own workspace)")
    j = sub.add_parser("jobs", help="Fixed Client Token MCP over stdio: the three job tools")
    j.add_argument("--job-seconds", type=float, default=None,
                   help="how long a job stays pending (default 0.5, or KC_JOB_SECONDS)")
    args = ap.parse_args(argv)
    if args.cmd == "mcp":
        from .stdio import run_agent_stdio
        return run_agent_stdio(args.core_url, args.route)
    if args.cmd == "jobs":
        from .stdio import run_jobs_stdio
        return run_jobs_stdio(args.job_seconds)
    return serve(args)


def serve(args: argparse.Namespace) -> int:
    token = os.environ.get("BLINDCORE_CONTROL_TOKEN") or None
    core = Core(control_token=token, clock=args.clock, hub_url=args.hub_url)
    srv = make_server(args.host, args.port, core, verbose=args.verbose, mcp_core_url=args.mcp_core_url,
                      allowed_origins=tuple(args.mcp_allow_origin))
    print(f"blindcore listening on http://{args.host}:{srv.server_address[1]} "
          f"(control extension {'on' if token else 'off: BLINDCORE_CONTROL_TOKEN unset'}, "
          f"clock {args.clock}, MCP at /agent-api/v1/workspaces/{{route}}/mcp)",
          file=sys.stderr, flush=True)
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        srv.server_close()
    return 0
