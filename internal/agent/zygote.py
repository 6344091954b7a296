# codecell Python zygote. Started once per sandbox by the agent with a
# SOCK_SEQPACKET socket on fd 3. It imports the heavy modules once, then forks
# a child per run, so a run pays neither for imports nor, on the request path,
# for fork: a spare child is forked ahead of need ("prefork") and waits for its
# run. The child becomes a plain `python3 -c CODE` look-alike: fresh __main__,
# sys.argv == ['-c'], exceptions printed by sys.excepthook, SystemExit, atexit
# handlers and non-daemon threads handled as CPython's shutdown does.
#
# Agent -> zygote: {"op": "prefork"}, answered {"type": "spare", "pid"} with
# the agent's end of a socket to that spare attached; the agent starts a run
# by sending the spare "run" with 5 fds (stdin, stdout, stderr, request pipe,
# status pipe), or, with no spare at hand, sends the zygote {"op": "run"} and
# the 5 fds, answered {"type": "started", "pid"}. Zygote -> agent,
# unprompted: {"type": "exit", "pid", "status", "maxrss_kb", "cpu_s"} for
# every child.
# A run writes {"exit", "cpu_s", "maxrss_kb"} to its status pipe just before
# it exits, so the agent need not wait for the kernel to tear it down.
import atexit, builtins, gc, json, os, resource, select, signal, socket, sys, types

def _preload(names):
    loaded, failed = [], {}
    for name in names:
        try:
            __import__(name)
            loaded.append(name)
        except Exception as e:  # a missing optional module is reported, not fatal
            failed[name] = f"{type(e).__name__}: {e}"
    return loaded, failed

def _dumpable_setter():
    # A non-dumpable zygote cannot be ptrace'd or have /proc/PID/mem written by
    # the runs it forks, even though they share its uid. The function is
    # looked up once here so a run does not pay for ctypes on its way in.
    try:
        import ctypes
        prctl = ctypes.CDLL(None, use_errno=True).prctl
        return lambda on: prctl(4, 1 if on else 0, 0, 0, 0)
    except Exception:
        return lambda on: None

_set_dumpable = _dumpable_setter()

def _collapse_heap():
    # Each run is a fork, and both the fork and the child's exit walk every
    # page table entry of the zygote's heap. Backing the heap with 2 MiB pages
    # where it is dense enough (MADV_COLLAPSE, Linux 6.1+) turns 512 entries
    # into one; a child's first write to such a page splits only its own copy
    # of the mapping and still copies 4 KiB. Best effort: older kernels and
    # gVisor refuse, and nothing changes.
    try:
        import ctypes
        madvise = ctypes.CDLL(None, use_errno=True).madvise
        madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        MADV_HUGEPAGE, MADV_COLLAPSE, huge = 14, 25, 2 << 20
        with open("/proc/self/maps") as f:
            maps = [line.split() for line in f]
        for m in maps:
            if m[1] != "rw-p" or (len(m) > 5 and m[5] != "[heap]"):
                continue  # only private anonymous memory: the heap, arenas, buffers
            lo, hi = (int(x, 16) for x in m[0].split("-"))
            lo, hi = -(-lo // huge) * huge, hi // huge * huge
            if hi > lo and madvise(lo, hi - lo, MADV_HUGEPAGE) == 0:
                madvise(lo, hi - lo, MADV_COLLAPSE)
    except Exception:
        pass

def _child_setup(close):
    for fd in close:
        os.close(fd)
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    os.setsid()  # own process group: a time-out kills the run and all it started
    _set_dumpable(True)
    try:
        with open("/proc/self/oom_score_adj", "w") as f:
            f.write("1000")  # under memory pressure, the run dies, not the zygote
    except OSError:
        pass
    if "numpy.random" in sys.modules:
        # `random` reseeds itself at fork; numpy does not. An int seed takes
        # the legacy path, ~0.8 ms cheaper in a fresh child than seed().
        sys.modules["numpy.random"].seed(int.from_bytes(os.urandom(4), "little"))
    # Everything a run needs that does not depend on its request is done
    # here, while the spare waits, and so off the request's path.
    atexit._clear()  # exit handlers the preloaded modules registered belong to the zygote
    os.chdir("/workspace")
    sys.argv = ["-c"]
    main = types.ModuleType("__main__")
    main.__builtins__ = builtins
    sys.modules["__main__"] = main

def _warm_up():
    # A fresh child pays a copy-on-write fault for every page it first
    # writes: ~1 ms of print(1)'s run. Going through a run's motions once,
    # with dummies, while this spare waits takes most of them off the
    # request's path.
    json.loads(json.dumps({"code": "pass", "env": dict(os.environ), "cwd": "/workspace"}))
    _set_environ(dict(os.environ))
    exec(compile("_ = [str(i) for i in range(3)]", "<string>", "exec"), {"__builtins__": builtins})
    atexit._run_exitfuncs()
    resource.getrusage(resource.RUSAGE_SELF)
    resource.getrusage(resource.RUSAGE_CHILDREN)

def _set_environ(env):
    # Usually the run's environment is the zygote's own: touch only what differs.
    for k in [k for k in os.environ if k not in env]:
        del os.environ[k]
    for k, v in env.items():
        if os.environ.get(k) != v:
            os.environ[k] = v

def _guard_imports(allowed):
    # A guard-rail for agents that follow rules, not a security boundary
    # (importlib and friends walk around it; the sandbox is the boundary).
    # Only the user's own imports are checked: a module it may use imports
    # whatever it needs.
    allowed = frozenset(allowed)
    shown = sorted(allowed)
    real = builtins.__import__
    def guarded(name, globals=None, locals=None, fromlist=(), level=0):
        if level == 0 and (globals is None or globals.get("__name__") == "__main__"):
            parts = name.split(".")
            if not any(".".join(parts[:i]) in allowed for i in range(1, len(parts) + 1)):
                raise ImportError(f"import of {parts[0]!r} is not allowed; allowed: {shown}", name=name)
        return real(name, globals, locals, fromlist, level)
    builtins.__import__ = guarded

def _read_all(fd):
    chunks = []
    while chunk := os.read(fd, 1 << 16):
        chunks.append(chunk)
    os.close(fd)
    return b"".join(chunks)

def _serve(sock):
    rd, wr = os.pipe()
    os.set_blocking(wr, False)
    signal.set_wakeup_fd(wr)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    send = lambda **m: sock.send(json.dumps(m).encode())
    while True:
        try:
            ready, _, _ = select.select([sock, rd], [], [])
        except InterruptedError:
            continue
        if rd in ready:
            try:
                os.read(rd, 4096)
            except BlockingIOError:
                pass
            while True:
                try:
                    pid, status, ru = os.wait4(-1, os.WNOHANG)
                except ChildProcessError:
                    break
                if pid == 0:
                    break
                send(type="exit", pid=pid, status=status, maxrss_kb=ru.ru_maxrss,
                     cpu_s=ru.ru_utime + ru.ru_stime)
        if sock not in ready:
            continue
        msg, fds, _, _ = socket.recv_fds(sock, 4096, 8)
        if not msg:
            os._exit(0)  # the agent is gone
        op = json.loads(msg)["op"]
        if op == "prefork":
            # The spare's end of its socket goes to the agent, which hands the
            # run's fds to the spare directly: the zygote is not on the path.
            theirs, ours = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            pid = os.fork()
            if pid == 0:
                ours.close()
                _child_setup([rd, wr, sock.detach()])
                _warm_up()
                msg, fds, _, _ = socket.recv_fds(theirs, 16, 8)
                if not msg:
                    os._exit(0)  # the agent let this spare go
                theirs.close()
                return msg, fds
            theirs.close()
            socket.send_fds(sock, [json.dumps({"type": "spare", "pid": pid}).encode()], [ours.fileno()])
            ours.close()
        elif op == "run":  # no spare at hand: fork one for this run
            pid = os.fork()
            if pid == 0:
                _child_setup([rd, wr, sock.detach()])
                return b"run", fds
            for fd in fds:
                os.close(fd)
            send(type="started", pid=pid)

def _kernel(sock):
    # A session's persistent interpreter, one cell at a time: the agent sends
    # "cell" with 4 fds (stdout, stderr, request pipe, result pipe); the
    # request is {"code"}; the result, written to its pipe, is {"value",
    # "outputs", "error"}. Names live on in __main__ from cell to cell. The
    # first cell's request also carries the session's environment.
    import ast, base64, io, linecache, traceback
    ns = sys.modules["__main__"].__dict__
    outputs = []

    def mime(obj):
        # What a notebook shows for obj: a PNG for a figure, else its repr.
        png = None
        if hasattr(obj, "savefig"):
            buf = io.BytesIO()
            obj.savefig(buf, format="png", bbox_inches="tight")
            png = buf.getvalue()
            if inline():
                sys.modules["matplotlib.pyplot"].close(obj)  # shown once, not again at the cell's end
        elif hasattr(obj, "_repr_png_"):
            png = obj._repr_png_()
        if png:
            return {"mime": "image/png", "data": base64.b64encode(png).decode()}
        html = obj._repr_html_() if hasattr(obj, "_repr_html_") else None
        if html:
            return {"mime": "text/html", "data": html, "text": repr(obj)}
        return {"mime": "text/plain", "data": repr(obj)}

    def inline():
        # Figures are the cell's outputs under Agg, as in a notebook; with an
        # interactive backend on the sandbox's display they are windows, left open.
        plt = sys.modules.get("matplotlib.pyplot")
        return plt is not None and plt.get_backend().lower() == "agg"

    def display(*objs):
        for obj in objs:
            outputs.append(mime(obj))

    ns["display"] = display
    gui = None  # hooks for programs with windows, once the session has a display
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    # SIGINT interrupts a cell and nothing else: one that comes late, while
    # the kernel waits, is dropped rather than left to hit the next cell.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    n = 0
    while True:
        msg, fds, _, _ = socket.recv_fds(sock, 16, 4)
        if not msg:
            os._exit(0)  # the agent let the kernel go
        out, err, reqfd, resfd = fds
        n += 1
        req = json.loads(_read_all(reqfd))
        if n == 1 and req.get("env") is not None:
            _set_environ(req["env"])  # the session's environment, once, before its first cell
            if req.get("allowed_imports") is not None:
                _guard_imports(req["allowed_imports"])
            if os.environ.get("DISPLAY"):
                gui = _GUI(sock)
        os.dup2(out, 1)
        os.dup2(err, 2)
        os.close(out)
        os.close(err)
        outputs.clear()
        if gui:
            gui.begin(req.get("capture_screenshot", False), req.get("settle_ms", 300) / 1000)
        before = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        try:
            result = _cell(req["code"], f"<cell-{n}>", ns, display, ast, linecache, traceback)
            if inline():
                plt = sys.modules["matplotlib.pyplot"]
                for num in plt.get_fignums():
                    outputs.append(mime(plt.figure(num)))
        except BaseException as e:  # in a figure's rendering, or an interrupt just after the cell
            result = {"error": {"name": type(e).__name__, "value": str(e), "traceback": ""}}
        finally:
            signal.signal(signal.SIGINT, signal.SIG_IGN)
        result["outputs"] = list(outputs)
        if gui:
            result["captured_before_teardown"] = gui.end()
        after = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        result["cpu_s"] = sum(a.ru_utime + a.ru_stime - b.ru_utime - b.ru_stime for a, b in zip(after, before))
        result["maxrss_kb"] = max(r.ru_maxrss for r in after)
        for f in (sys.stdout, sys.stderr):
            try:
                f.flush()
            except Exception:
                pass
        os.dup2(devnull, 1)  # our copies of the output pipes go: the agent sees EOF
        os.dup2(devnull, 2)
        try:
            body = json.dumps(result).encode()
        except Exception as e:
            body = json.dumps({"error": {"name": type(e).__name__, "value": str(e), "traceback": ""}}).encode()
        with os.fdopen(resfd, "wb") as f:
            f.write(body)

class _PatchOnImport:
    # A meta path finder that lets a module load as usual, then patches it.
    def __init__(self, name, patch):
        self.name, self.patch = name, patch

    def find_spec(self, name, path, target=None):
        if name != self.name:
            return None
        import importlib.util
        sys.meta_path.remove(self)  # find it the usual way, once
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        load, patch = spec.loader.exec_module, self.patch

        def exec_module(module):
            load(module)
            patch(module)
        spec.loader.exec_module = exec_module
        return spec

class _GUI:
    # With a display, windows must not hang a step nor vanish before they are
    # seen: mainloop() (tkinter's, and so plt.show() under TkAgg) runs for the
    # settle time and returns, leaving the windows open; when a screenshot is
    # asked for, drawing is flushed and given the settle time at the cell's
    # end, and a root window the code destroys is captured first (the agent
    # takes the picture when the kernel asks over its socket).
    def __init__(self, sock):
        import time, tkinter, weakref
        self.sock, self.time, self.tk = sock, time, tkinter
        self.roots = weakref.WeakSet()
        self.capture, self.settle, self.captured = False, 0.3, False
        gui = self
        init, destroy = tkinter.Tk.__init__, tkinter.Tk.destroy

        def tk_init(root, *a, **kw):
            init(root, *a, **kw)
            gui.roots.add(root)

        def tk_destroy(root):
            if gui.capture and root in gui.roots:
                gui.flush()
                gui.before_teardown()
            gui.roots.discard(root)
            destroy(root)

        def mainloop(widget, n=0):
            gui.run(gui.settle)

        tkinter.Tk.__init__, tkinter.Tk.destroy = tk_init, tk_destroy
        tkinter.Misc.mainloop = mainloop
        tkinter.mainloop = lambda n=0: gui.run(gui.settle)
        sys.meta_path.insert(0, _PatchOnImport("pygame", self.patch_pygame))

    def before_teardown(self):
        # Asks the agent for the screen now, if the cell wants a screenshot.
        if self.capture:
            self.sock.send(b"capture")
            self.sock.recv(16)
            self.captured = True

    def patch_pygame(self, pygame):
        # A window pygame closes at the cell's end is captured first.
        gui = self
        for mod, name in ((pygame, "quit"), (pygame.display, "quit")):
            orig = getattr(mod, name)

            def quit(orig=orig):
                if pygame.display.get_init() and pygame.display.get_surface() is not None:
                    gui.time.sleep(gui.settle if gui.capture else 0)
                    gui.before_teardown()
                orig()
            setattr(mod, name, quit)

    def run(self, seconds):
        # The event loop of every live window, for a while.
        deadline = self.time.monotonic() + seconds
        while True:
            for root in list(self.roots):
                try:
                    root.update()
                except self.tk.TclError:
                    self.roots.discard(root)
            if self.time.monotonic() >= deadline:
                return
            self.time.sleep(0.01)

    def flush(self):
        plt = sys.modules.get("matplotlib.pyplot")
        if plt is not None:
            for num in plt.get_fignums():
                plt.figure(num).canvas.draw_idle()
        self.run(self.settle)

    def begin(self, capture, settle):
        self.capture, self.settle, self.captured = capture, settle, False

    def end(self):
        # Whether the picture to return was taken before the windows went.
        if self.capture and self.roots:
            self.flush()
        return self.captured and not self.roots

def _cell(code, filename, ns, display, ast, linecache, traceback):
    # Like a notebook cell: statements run, and a final expression's value is
    # the cell's value. Tracebacks show the cell's own lines.
    linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
    try:
        tree = ast.parse(code, filename, "exec")
    except SyntaxError as e:
        return {"syntax_error": True, "error": {"name": type(e).__name__, "value": str(e),
                "traceback": "".join(traceback.format_exception(type(e), e, None))}}
    try:
        last = None
        if tree.body and isinstance(tree.body[-1], ast.Expr):
            last = ast.Expression(tree.body.pop().value)
        exec(compile(tree, filename, "exec"), ns)
        value = eval(compile(last, filename, "eval"), ns) if last else None
    except BaseException as e:
        tb = e.__traceback__
        while tb is not None and not tb.tb_frame.f_code.co_filename.startswith("<cell-"):
            tb = tb.tb_next  # drop the kernel's own frames
        return {"error": {"name": type(e).__name__, "value": str(e),
                          "traceback": "".join(traceback.format_exception(type(e), e, tb))}}
    if value is None:
        return {}
    ns["_"] = value
    if hasattr(value, "savefig") or hasattr(value, "_repr_png_"):
        display(value)  # a figure is an output, as in a notebook
        return {}
    return {"value": repr(value)}

sock = socket.socket(fileno=3)
_set_dumpable(False)
_loaded, _failed = _preload([m for m in sys.argv[1:] if m])
# Objects that exist now are never collected in the zygote; freezing them
# keeps the children's collector from writing to (and so copying) every page.
gc.freeze()
_collapse_heap()
sock.send(json.dumps({"type": "ready", "python": sys.version.split()[0],
                      "loaded": _loaded, "failed": _failed}).encode())
_kind, _fds = _serve(sock)
if _kind == b"kernel":
    _kernel(socket.socket(fileno=_fds[0]))  # never returns
_stdin, _stdout, _stderr, _reqfd, _statusfd = _fds

# From here on this process is the run, with a fresh __main__ of its own.
_main = sys.modules["__main__"]
_req = json.loads(_read_all(_reqfd))
for _i, _fd in enumerate((_stdin, _stdout, _stderr)):
    os.dup2(_fd, _i)
    os.close(_fd)
if _req.get("cwd"):
    os.chdir(_req["cwd"])
_set_environ(_req.get("env") or {})
if _req.get("allowed_imports") is not None:
    _guard_imports(_req["allowed_imports"])

def _exit_code(e):
    # CPython's handle_system_exit: None is 0, an int is itself, anything else
    # is printed to stderr and means 1.
    code = e.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    try:
        print(code, file=sys.stderr)
    except Exception:
        pass
    return 1

def _finish(code):
    # What Py_FinalizeEx does that a program can observe: wait for non-daemon
    # threads, run atexit handlers, flush stdio. Tearing down every preloaded
    # module is skipped: it is invisible and costs ~100 ms with pandas loaded.
    try:
        if "threading" in sys.modules:
            sys.modules["threading"]._shutdown()
        atexit._run_exitfuncs()
    except SystemExit as e:
        code = _exit_code(e)
    for f in (sys.stdout, sys.stderr):
        try:
            f.flush()
        except Exception:
            pass
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    try:
        os.write(_statusfd, json.dumps({
            "exit": code, "maxrss_kb": max(me.ru_maxrss, kids.ru_maxrss),
            "cpu_s": me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime}).encode())
    except OSError:
        pass
    # Closing stdio now gives the agent EOF before the kernel tears down our
    # address space.
    for fd in (0, 1, 2, _statusfd):
        try:
            os.close(fd)
        except OSError:
            pass
    os._exit(code)

try:
    exec(compile(_req["code"], "<string>", "exec"), _main.__dict__)
except SystemExit as _e:
    _finish(_exit_code(_e))
except BaseException as _e:
    # Drop the zygote's own frame so the traceback reads like `python3 -c`.
    _tb = _e.__traceback__.tb_next if _e.__traceback__ else None
    sys.excepthook(type(_e), _e.with_traceback(_tb), _tb)
    if isinstance(_e, KeyboardInterrupt):
        sys.stdout.flush(); sys.stderr.flush()
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    _finish(1)
_finish(0)
