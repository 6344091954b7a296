"""codecell's Python SDK: sandboxes for untrusted code, over the codecell HTTP API.

Standard library only. The server's address comes from the ``url`` argument or the
``CODECELL_URL`` environment variable (default ``http://127.0.0.1:8080``).

    from codecell import Sandbox

    with Sandbox.create() as sb:
        sb.run_code("x = 20")
        print(sb.run_code("x + 1").value)          # '21'
        sb.files.write("data.csv", "a,b\\n1,2\\n")
        print(sb.run_shell("wc -l data.csv").stdout)

Results are dataclasses whose fields have the API's names; a failed request raises
CodecellError carrying the server's error code.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import os
import urllib.parse
from dataclasses import dataclass, field, fields
from typing import Any, Callable, Dict, List, Optional, Union

__all__ = [
    "AsyncSandbox", "CellError", "CodecellError", "ExecResult", "FileEntry", "Files",
    "Output", "Sandbox", "SandboxInfo", "execute",
]


class CodecellError(Exception):
    """A request the server refused or could not serve."""

    def __init__(self, status: int, code: str, message: str):
        super().__init__(f"{code} ({status}): {message}")
        self.status = status
        self.code = code
        self.message = message


def _build(cls, data: Dict[str, Any]):
    """A dataclass from an API object, ignoring fields this SDK does not know."""
    known = {f.name for f in fields(cls)}
    return cls(**{k: v for k, v in data.items() if k in known})


@dataclass
class Output:
    mime: str  # image/png (data is base64), text/html or text/plain
    data: str
    text: Optional[str] = None


@dataclass
class CellError:
    name: str
    value: str
    traceback: str


@dataclass
class ExecResult:
    status: str  # ok, error, timeout, oom or killed
    exit_code: int
    signal: Optional[str]
    stdout: str
    stderr: str
    truncated: bool
    duration_ms: float
    cpu_ms: float
    max_rss_kb: int
    value: Optional[str] = None
    outputs: List[Output] = field(default_factory=list)
    error: Optional[CellError] = None
    interrupted: bool = False
    kernel_restarted: bool = False
    episode_id: Optional[str] = None
    step_count: Optional[int] = None
    packages: Optional[Dict[str, Any]] = None  # what was installed, skipped (why) and corrected
    network: Optional[Dict[str, Any]] = None  # allow-list and allowed/denied connection counts

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @classmethod
    def from_api(cls, data: Dict[str, Any]) -> "ExecResult":
        r = _build(cls, data)
        r.outputs = [_build(Output, o) for o in data.get("outputs") or []]
        r.error = _build(CellError, data["error"]) if data.get("error") else None
        return r


@dataclass
class FileEntry:
    name: str
    type: str  # file, dir, symlink or other
    size: int
    mode: str
    mtime: str


@dataclass
class SandboxInfo:
    id: str
    status: str
    runtime: str
    created_at: str
    last_active_at: str
    expires_at: str
    episode_id: str
    step_count: int
    episodes: int
    last_exit_code: int
    memory_mb: int
    cpus: float
    pids: int
    idle_timeout_s: float
    max_lifetime_s: float
    max_episodes: int
    env: Optional[Dict[str, str]] = None
    display: Optional[Dict[str, Any]] = None
    template: Optional[str] = None
    packages: Optional[Dict[str, Any]] = None
    network: Optional[Dict[str, Any]] = None
    allowed_imports: Optional[List[str]] = None


Packages = Union[List[str], Dict[str, List[str]]]


def _provisioning(template: Optional[str], packages: Optional[Packages], network: Optional[List[str]],
                  allowed_imports: Optional[List[str]]) -> Dict[str, Any]:
    """The request fields that say what a sandbox is made with. packages is a
    list of Python names or {"python": [...], "javascript": [...]}; network is
    the egress allow-list."""
    body: Dict[str, Any] = {}
    if template is not None:
        body["template"] = template
    if packages is not None:
        body["packages"] = {"python": list(packages)} if isinstance(packages, (list, tuple)) else dict(packages)
    if network is not None:
        body["network"] = {"allow": list(network)}
    if allowed_imports is not None:
        body["allowed_imports"] = list(allowed_imports)
    return body


class _Client:
    """One HTTP connection's worth of codecell API."""

    def __init__(self, url: Optional[str], timeout: float):
        self.url = urllib.parse.urlsplit(url or os.environ.get("CODECELL_URL", "http://127.0.0.1:8080"))
        if self.url.scheme not in ("http", "https"):
            raise ValueError(f"codecell URL must be http(s)://host:port, not {url!r}")
        self.timeout = timeout

    def _conn(self) -> http.client.HTTPConnection:
        cls = http.client.HTTPSConnection if self.url.scheme == "https" else http.client.HTTPConnection
        return cls(self.url.netloc, timeout=self.timeout)

    def open(self, method: str, path: str, body: Any = None, raw: Optional[bytes] = None):
        """Sends a request; returns (connection, response), the response unread."""
        headers = {}
        data = raw
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        conn = self._conn()
        conn.request(method, self.url.path.rstrip("/") + path, body=data, headers=headers)
        resp = conn.getresponse()
        if resp.status >= 400:
            payload = resp.read()
            conn.close()
            raise _error(resp.status, payload)
        return conn, resp

    def call(self, method: str, path: str, body: Any = None, raw: Optional[bytes] = None) -> Any:
        conn, resp = self.open(method, path, body, raw)
        try:
            payload = resp.read()
        finally:
            conn.close()
        if resp.getheader("Content-Type", "").startswith("application/json") and payload:
            return json.loads(payload)
        return payload


def _error(status: int, payload: bytes) -> CodecellError:
    try:
        err = json.loads(payload)["error"]
        return CodecellError(status, err["code"], err["message"])
    except (ValueError, KeyError, TypeError):
        return CodecellError(status, "http_error", payload.decode(errors="replace")[:500])


def execute(code: str, language: str = "python", *, url: Optional[str] = None, timeout_s: Optional[float] = None,
            stdin: str = "", env: Optional[Dict[str, str]] = None, runtime: Optional[str] = None,
            template: Optional[str] = None, packages: Optional[Packages] = None, network: Optional[List[str]] = None,
            allowed_imports: Optional[List[str]] = None) -> ExecResult:
    """Runs code once in a fresh sandbox (POST /v1/execute)."""
    body: Dict[str, Any] = {"language": language, "code": code, "stdin": stdin}
    body.update(_provisioning(template, packages, network, allowed_imports))
    for k, v in (("timeout_s", timeout_s), ("env", env), ("runtime", runtime)):
        if v is not None:
            body[k] = v
    return ExecResult.from_api(_Client(url, 600).call("POST", "/v1/execute", body))


class Files:
    """A sandbox's /workspace. Paths are relative to it, or absolute inside it."""

    def __init__(self, client: _Client, sandbox_id: str):
        self._client = client
        self._base = f"/v1/sandboxes/{sandbox_id}/files?path="

    def _path(self, path: str, fmt: str = "") -> str:
        return self._base + urllib.parse.quote(path, safe="") + (f"&format={fmt}" if fmt else "")

    def read(self, path: str) -> bytes:
        return self._client.call("GET", self._path(path))

    def read_text(self, path: str, encoding: str = "utf-8") -> str:
        return self.read(path).decode(encoding)

    def write(self, path: str, data: "bytes | str") -> int:
        """Writes a file (parents are made); returns its size."""
        raw = data.encode() if isinstance(data, str) else bytes(data)
        return self._client.call("PUT", self._path(path), raw=raw)["size"]

    def list(self, path: str = ".") -> List[FileEntry]:
        return [_build(FileEntry, e) for e in self._client.call("GET", self._path(path))["entries"]]

    def delete(self, path: str) -> None:
        self._client.call("DELETE", self._path(path))

    def download_tar(self, path: str = ".") -> bytes:
        return self._client.call("GET", self._path(path, "tar"))

    def upload_tar(self, path: str, tar: bytes) -> int:
        return self._client.call("PUT", self._path(path, "tar"), raw=tar)["size"]


Callback = Callable[[str], None]


class Sandbox:
    """A stateful sandbox (a session): persistent Python, bash and JavaScript kernels."""

    def __init__(self, info: SandboxInfo, client: _Client):
        self.info = info
        self.id = info.id
        self._client = client
        self.files = Files(client, info.id)

    @classmethod
    def create(cls, url: Optional[str] = None, *, runtime: Optional[str] = None, memory_mb: Optional[int] = None,
               cpus: Optional[float] = None, pids: Optional[int] = None, idle_timeout_s: Optional[float] = None,
               max_lifetime_s: Optional[float] = None, env: Optional[Dict[str, str]] = None,
               max_episodes: Optional[int] = None, display: Optional[bool] = None, template: Optional[str] = None,
               packages: Optional[Packages] = None, network: Optional[List[str]] = None,
               allowed_imports: Optional[List[str]] = None, timeout: float = 600) -> "Sandbox":
        """Claims a warm sandbox (POST /v1/sandboxes). timeout bounds each HTTP call."""
        client = _Client(url, timeout)
        body = {k: v for k, v in dict(runtime=runtime, memory_mb=memory_mb, cpus=cpus, pids=pids,
                                      idle_timeout_s=idle_timeout_s, max_lifetime_s=max_lifetime_s, env=env,
                                      max_episodes=max_episodes, display=display).items() if v is not None}
        body.update(_provisioning(template, packages, network, allowed_imports))
        return cls(_build(SandboxInfo, client.call("POST", "/v1/sandboxes", body)), client)

    def run_code(self, code: str, language: str = "python", *, timeout_s: Optional[float] = None,
                 on_stdout: Optional[Callback] = None, on_stderr: Optional[Callback] = None) -> ExecResult:
        """Runs one step in the sandbox's kernel of the language. With on_stdout or
        on_stderr, output is handed to them as it is produced."""
        body: Dict[str, Any] = {"language": language, "code": code}
        if timeout_s is not None:
            body["timeout_s"] = timeout_s
        if on_stdout is None and on_stderr is None:
            return ExecResult.from_api(self._client.call("POST", f"/v1/sandboxes/{self.id}/exec", body))
        return self._stream(body, on_stdout, on_stderr)

    def _stream(self, body: Dict[str, Any], on_stdout: Optional[Callback], on_stderr: Optional[Callback]) -> ExecResult:
        conn, resp = self._client.open("POST", f"/v1/sandboxes/{self.id}/exec/stream", body)
        try:
            event, data = None, None
            for raw in resp:  # Server-Sent Events, one field per line
                line = raw.decode().rstrip("\n")
                if line.startswith("event: "):
                    event = line[7:]
                elif line.startswith("data: "):
                    data = json.loads(line[6:])
                elif line == "" and event:
                    if event == "stdout" and on_stdout:
                        on_stdout(data["data"])
                    elif event == "stderr" and on_stderr:
                        on_stderr(data["data"])
                    elif event == "result":
                        return ExecResult.from_api(data)
                    elif event == "error":
                        raise CodecellError(resp.status, data["error"]["code"], data["error"]["message"])
                    event, data = None, None
        finally:
            conn.close()
        raise CodecellError(0, "stream_ended", "the server closed the stream before the result")

    def run_shell(self, command: str, **kwargs) -> ExecResult:
        """Runs a command in the sandbox's persistent bash."""
        return self.run_code(command, language="bash", **kwargs)

    def reset(self) -> SandboxInfo:
        """A new episode: fresh kernels, empty /workspace, a new episode_id."""
        self.info = _build(SandboxInfo, self._client.call("POST", f"/v1/sandboxes/{self.id}/reset"))
        return self.info

    def refresh(self) -> SandboxInfo:
        self.info = _build(SandboxInfo, self._client.call("GET", f"/v1/sandboxes/{self.id}"))
        return self.info

    def close(self) -> None:
        """Stops the sandbox; closing one already gone is not an error."""
        try:
            self._client.call("DELETE", f"/v1/sandboxes/{self.id}")
        except CodecellError as e:
            if e.code != "not_found":
                raise

    def __enter__(self) -> "Sandbox":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class AsyncSandbox:
    """Sandbox for asyncio: the same calls, awaited (each runs in a worker thread)."""

    def __init__(self, sandbox: Sandbox):
        self._sb = sandbox
        self.id = sandbox.id
        self.files = sandbox.files  # blocking; wrap with asyncio.to_thread if needed

    @classmethod
    async def create(cls, url: Optional[str] = None, **kwargs) -> "AsyncSandbox":
        return cls(await asyncio.to_thread(Sandbox.create, url, **kwargs))

    @property
    def info(self) -> SandboxInfo:
        return self._sb.info

    async def run_code(self, code: str, language: str = "python", **kwargs) -> ExecResult:
        return await asyncio.to_thread(self._sb.run_code, code, language, **kwargs)

    async def run_shell(self, command: str, **kwargs) -> ExecResult:
        return await asyncio.to_thread(self._sb.run_shell, command, **kwargs)

    async def reset(self) -> SandboxInfo:
        return await asyncio.to_thread(self._sb.reset)

    async def close(self) -> None:
        await asyncio.to_thread(self._sb.close)

    async def __aenter__(self) -> "AsyncSandbox":
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()
