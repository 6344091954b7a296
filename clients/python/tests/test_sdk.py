"""The SDK against a real codecell server at $CODECELL_URL (the Go e2e suite starts one)."""

import asyncio
import base64
import io
import os
import tarfile

import pytest

from codecell import AsyncSandbox, CodecellError, ExecResult, Sandbox, execute

if "CODECELL_URL" not in os.environ:
    pytest.skip("CODECELL_URL names no running server", allow_module_level=True)


def test_state_value_and_errors():
    with Sandbox.create(env={"GREETING": "hi"}) as sb:
        assert sb.info.step_count == 0 and sb.info.episode_id
        assert sb.run_code("x = 20").value is None
        r = sb.run_code("x + 1")
        assert isinstance(r, ExecResult) and r.ok and r.value == "21" and r.step_count == 2
        assert sb.run_code("import os\nos.environ['GREETING']").value == "'hi'"
        r = sb.run_code("y = 1\n1 / 0")
        assert r.status == "error" and r.exit_code == 1
        assert r.error.name == "ZeroDivisionError" and 'File "<cell-4>", line 2' in r.error.traceback
        assert sb.run_code("x, y").value == "(20, 1)"


def test_shell_and_javascript():
    with Sandbox.create() as sb:
        sb.run_shell("cd /tmp && export A=1")
        r = sb.run_shell("pwd; echo $A; exit 3")
        assert r.stdout == "/tmp\n1\n" and r.exit_code == 3 and r.kernel_restarted
        assert sb.run_code("const z = await Promise.resolve(5); z * 2", language="javascript").value == "10"


def test_figures_are_png_outputs():
    with Sandbox.create() as sb:
        r = sb.run_code("import matplotlib.pyplot as plt\nplt.plot([1, 2])\nNone")
        assert [o.mime for o in r.outputs] == ["image/png"]
        assert base64.b64decode(r.outputs[0].data)[:8] == b"\x89PNG\r\n\x1a\n"


def test_files():
    with Sandbox.create() as sb:
        assert sb.files.write("data/in.txt", "a,b\n1,2\n") == 8
        assert sb.run_shell("wc -l < data/in.txt").stdout == "2\n"
        assert sb.files.read_text("data/in.txt") == "a,b\n1,2\n"
        [entry] = sb.files.list("data")
        assert (entry.name, entry.type, entry.size, entry.mode) == ("in.txt", "file", 8, "0644")
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            info = tarfile.TarInfo("pkg/mod.py")
            body = b"VALUE = 7\n"
            info.size = len(body)
            tar.addfile(info, io.BytesIO(body))
        sb.files.upload_tar("src", buf.getvalue())
        assert sb.run_code("import sys\nsys.path.insert(0, '/workspace/src/pkg')\nimport mod\nmod.VALUE").value == "7"
        with tarfile.open(fileobj=io.BytesIO(sb.files.download_tar("src"))) as tar:
            assert tar.extractfile("pkg/mod.py").read() == body
        sb.files.delete("data")
        with pytest.raises(CodecellError) as e:
            sb.files.read("data/in.txt")
        assert e.value.status == 404 and e.value.code == "not_found"
        with pytest.raises(CodecellError) as e:
            sb.files.read("../etc/passwd")
        assert e.value.status == 400 and e.value.code == "invalid_request"


def test_reset():
    with Sandbox.create() as sb:
        first = sb.info.episode_id
        sb.run_code("kept = 1")
        sb.files.write("f", "x")
        info = sb.reset()
        assert info.episode_id != first and info.step_count == 0 and info.episodes == 1
        assert sb.run_code("'kept' in globals()").value == "False"
        assert sb.files.list() == []


def test_streaming_callbacks():
    out, err = [], []
    with Sandbox.create() as sb:
        r = sb.run_code("import sys\nfor i in range(3): print(i, flush=True)\nprint('e', file=sys.stderr)\n'done'",
                        on_stdout=out.append, on_stderr=err.append)
        assert "".join(out) == "0\n1\n2\n" and "".join(err) == "e\n"
        assert r.value == "'done'" and r.stdout == "0\n1\n2\n"


def test_errors_carry_the_server_code():
    with pytest.raises(CodecellError) as e:
        Sandbox.create(memory_mb=1)
    assert e.value.status == 400 and e.value.code == "invalid_request" and "memory_mb" in e.value.message
    sb = Sandbox.create()
    sb.close()
    sb.close()  # closing twice is fine
    with pytest.raises(CodecellError) as e:
        sb.run_code("1")
    assert e.value.status == 404 and e.value.code == "not_found"


def test_stateless_execute():
    r = execute("print(6 * 7)")
    assert r.ok and r.stdout == "42\n" and r.value is None
    r = execute("echo $0", language="bash")
    assert r.stdout == "bash\n"


def test_async_sandboxes_are_independent():
    async def one(n):
        async with await AsyncSandbox.create() as sb:
            await sb.run_code(f"n = {n}")
            return (await sb.run_code("n * 10")).value

    async def main():
        return await asyncio.gather(one(1), one(2), one(3))

    assert asyncio.run(main()) == ["10", "20", "30"]


def test_network_packages_and_import_guard():
    import http.server
    import threading

    class Hello(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = b"hello from the host"
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hello)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    url = "http://127.0.0.1:%d/" % srv.server_address[1]
    try:
        code = "import urllib.request\nprint(urllib.request.urlopen(%r, timeout=5).read().decode())" % url
        r = execute(code, network=["127.0.0.1:%d" % srv.server_address[1]])
        assert r.stdout == "hello from the host\n" and r.network["allowed"] == 1 and r.network["denied"] == 0
        denied = "import urllib.request\nurllib.request.urlopen('http://example.org/', timeout=5)"
        r = execute(denied, network=["example.com"])
        assert "HTTP Error 403: codecell: egress to example.org:80 is not allowed" in r.stderr and r.network["denied"] == 1
    finally:
        srv.shutdown()
    # Names the image already has need no install; typos are corrected.
    r = execute("import dataclasses; print('ok')", packages=["dataclass", "json"])
    assert r.stdout == "ok\n"
    assert r.packages["corrected"] == {"dataclass": "dataclasses"}
    assert r.packages["skipped"] == {"dataclass": "standard library", "json": "standard library"}
    with Sandbox.create(allowed_imports=["math"]) as sb:
        assert sb.info.allowed_imports == ["math"]
        err = sb.run_code("import os").error
        assert err.name == "ImportError" and err.value == "import of 'os' is not allowed; allowed: ['math']"
