# codecell Python zygote. Started once per sandbox by the agent with a
# SOCK_SEQPACKET socket on fd 3. It imports the heavy modules once, then forks a
# child per run, so a run pays for fork, not for imports. The child becomes a
# plain `python3 -c CODE` look-alike: fresh __main__, sys.argv == ['-c'],
# exceptions printed by sys.excepthook, SystemExit and interpreter shutdown
# (atexit, non-daemon threads, flushing) handled by CPython itself.
import json, os, signal, socket, sys

def _preload(names):
    loaded, failed = [], {}
    for name in names:
        try:
            __import__(name)
            loaded.append(name)
        except Exception as e:  # a missing optional module is reported, not fatal
            failed[name] = f"{type(e).__name__}: {e}"
    return loaded, failed

def _set_dumpable(on):
    # A non-dumpable zygote cannot be ptrace'd or have /proc/PID/mem written by
    # the runs it forks, even though they share its uid.
    try:
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(4, 1 if on else 0, 0, 0, 0)
    except Exception:
        pass

def _serve(sock):
    rd, wr = os.pipe()
    os.set_blocking(wr, False)
    signal.set_wakeup_fd(wr)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    import select
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
                sock.send(json.dumps({"type": "exit", "pid": pid, "status": status,
                                      "maxrss_kb": ru.ru_maxrss,
                                      "cpu_s": ru.ru_utime + ru.ru_stime}).encode())
        if sock in ready:
            msg, fds, _, _ = socket.recv_fds(sock, 65536, 8)
            if not msg:
                os._exit(0)  # the agent is gone
            pid = os.fork()
            if pid == 0:
                os.close(rd)
                os.close(wr)
                return fds
            for fd in fds:
                os.close(fd)
            sock.send(json.dumps({"type": "started", "pid": pid}).encode())

def _become_run(sock, fds):
    stdin, stdout, stderr, reqfd = fds
    sock.close()
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
    with os.fdopen(reqfd, "rb") as f:
        req = json.loads(f.read())
    for i, fd in enumerate((stdin, stdout, stderr)):
        os.dup2(fd, i)
        os.close(fd)
    os.chdir(req.get("cwd") or "/workspace")
    os.environ.clear()
    os.environ.update(req.get("env") or {})
    sys.argv = ["-c"]
    if "numpy.random" in sys.modules:  # `random` reseeds itself at fork; numpy does not
        sys.modules["numpy.random"].seed()
    return req["code"]

sock = socket.socket(fileno=3)
_set_dumpable(False)
_loaded, _failed = _preload([m for m in sys.argv[1:] if m])
sock.send(json.dumps({"type": "ready", "python": sys.version.split()[0],
                      "loaded": _loaded, "failed": _failed}).encode())
_code = _become_run(sock, _serve(sock))
# From here on this process is the run, with a fresh __main__ of its own.
import types, builtins
_main = types.ModuleType("__main__")
_main.__builtins__ = builtins
sys.modules["__main__"] = _main
try:
    exec(compile(_code, "<string>", "exec"), _main.__dict__)
except SystemExit:
    raise
except BaseException as _e:
    # Drop the zygote's own frame so the traceback reads like `python3 -c`.
    _tb = _e.__traceback__.tb_next if _e.__traceback__ else None
    sys.excepthook(type(_e), _e, _tb)
    if isinstance(_e, KeyboardInterrupt):
        sys.stdout.flush(); sys.stderr.flush()
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    raise SystemExit(1)
