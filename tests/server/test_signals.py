"""SIGINT/SIGTERM drain the server whichever of its threads the kernel hands them to.

Libraries start threads before main (OpenBLAS's pool) that never block the signals, so a server that
relied on a blocked mask and sigwait was killed outright when the kernel picked one of them. The test
sends the signal to every thread of the server in turn (tgkill), each to a fresh server, and requires
the drain message and exit status 0 every time.
"""
import ctypes
import os
import signal

from conftest import RunningServer

SYS_TGKILL = 234  # x86-64
libc = ctypes.CDLL(None, use_errno=True)


def tgkill(pid, tid, sig):
    if libc.syscall(SYS_TGKILL, pid, tid, sig) != 0:
        raise OSError(ctypes.get_errno(), f"tgkill {pid} {tid}")


def threads(pid):
    return sorted(int(t) for t in os.listdir(f"/proc/{pid}/task"))


def test_a_signal_to_any_thread_drains():
    first = RunningServer("--budget", "32", "--window", "8")
    n = len(threads(first.proc.pid))
    first.stop()
    assert n >= 2
    for index in range(n):
        for sig in (signal.SIGTERM, signal.SIGINT):
            s = RunningServer("--budget", "32", "--window", "8")
            assert s.get("/health")[0] == 200
            tids = threads(s.proc.pid)
            tgkill(s.proc.pid, tids[min(index, len(tids) - 1)], sig)
            code = s.proc.wait(timeout=30)
            err = s.proc.stderr.read()
            assert code == 0, f"thread {index} of {len(tids)}, {sig.name}: exit {code}\n{err}"
            assert "drained, exiting" in err, err


def test_sigterm_to_the_process_drains_every_time():
    """The kernel picks the thread of a process-directed signal: 20 fresh servers, each sent SIGTERM as
    soon as it answers, each drains and exits 0."""
    for start in range(20):
        s = RunningServer("--budget", "32", "--window", "8")
        assert s.get("/health")[0] == 200
        os.kill(s.proc.pid, signal.SIGTERM)
        code = s.proc.wait(timeout=30)
        err = s.proc.stderr.read()
        assert code == 0, f"start {start}: exit {code}\n{err}"
        assert "SIGTERM received, draining" in err and "drained, exiting" in err, err
