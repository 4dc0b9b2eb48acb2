"""A small HTTP client of the Core's Agent API, as an adapter in front of the Core uses it."""
from __future__ import annotations

import json
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

AGENT_BASE = "/agent-api/v1/workspaces/"


@dataclass
class CoreAnswer:
    status: int          # 0: no answer (connection refused, timeout, not JSON)
    body: Any            # the parsed JSON body, or None

    @property
    def error_code(self) -> str | None:
        if isinstance(self.body, dict) and isinstance(self.body.get("error"), str):
            return self.body["error"]
        return None


class CoreClient:
    def __init__(self, base_url: str, timeout: float = 15.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        # Never through a proxy: the Core is the adapter's own loopback peer.
        self.opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

    def workspace_path(self, route: str, tail: str) -> str:
        return AGENT_BASE + quote(route, safe="") + "/" + tail

    def request(self, method: str, path: str, token: str, body: Any = None) -> CoreAnswer:
        data = None if body is None else json.dumps(body, ensure_ascii=False).encode("utf-8")
        req = urllib.request.Request(self.base_url + path, data=data, method=method)
        req.add_header("Authorization", "Bearer " + token)
        req.add_header("Accept", "application/json")
        if data is not None:
            req.add_header("Content-Type", "application/json")
        try:
            with self.opener.open(req, timeout=self.timeout) as resp:
                status, raw = resp.status, resp.read()
        except urllib.error.HTTPError as e:
            status, raw = e.code, e.read()
        except (urllib.error.URLError, OSError, ValueError):
            return CoreAnswer(0, None)
        try:
            parsed = json.loads(raw.decode("utf-8")) if raw else None
        except (UnicodeDecodeError, ValueError):
            return CoreAnswer(status, None)
        return CoreAnswer(status, parsed)
