"""The platform starts on a background thread when a program asks ``torch.accelerator.is_available()`` (diffusers
does at import), so that opening a TPU chip (~10 s) overlaps the program's own imports and loading: the answer
comes at once, the first device use waits only for what is left, JAX is configured once however many threads
ask, a failed start raises at the first use, and a fork while the thread is starting never hangs the child.
Each case runs in a fresh process (the platform starts once per process)."""
import pytest

from tests.harness.isolated import run_isolated, stderr_excerpt

pytestmark = [pytest.mark.usefixtures("watchdog"), pytest.mark.slow]


def _run(code: str, env: dict | None = None):
    proc = run_isolated(code, timeout=120, env=env)
    assert proc.returncode == 0, f"child failed or hung:\n{proc.stdout[-1500:]}\n{stderr_excerpt(proc.stderr)}"
    return proc.stdout


def test_is_available_answers_without_waiting_and_starts_the_platform_once():
    out = _run("""
        import threading, time
        from torch_tpu.runtime import compile_events, platform
        installs = []
        real_install = compile_events.install
        compile_events.install = lambda j: (installs.append(1), real_install(j))[1]
        gate = threading.Event()
        real_local_devices = platform._local_devices
        opened = []
        def slow_local_devices():
            gate.wait(30)  # the device takes its time to open
            opened.append(1)
            return real_local_devices()
        platform._local_devices = slow_local_devices
        # answered before the device opened (it stays held at the gate until this thread sets it below)
        print("AVAILABLE", torch.accelerator.is_available(), not opened)
        print("STARTED-BEFORE-USE", torch.tpu.is_initialized())
        # other threads asking for the device meanwhile wait for the one start
        seen = []
        threads = [threading.Thread(target=lambda: seen.append(len(platform.devices()))) for _ in range(4)]
        for t in threads:
            t.start()
        time.sleep(0.2)
        gate.set()
        for t in threads:
            t.join(60)
        y = (torch.arange(4.0, device="tpu") * 2).cpu().tolist()
        print("RESULT", y, "DEVICES", seen, "JAX-CONFIGURED", len(installs), "INITIALIZED", torch.tpu.is_initialized())
    """)
    assert "AVAILABLE True True" in out  # at once, although the device was still opening
    assert "STARTED-BEFORE-USE False" in out
    assert "RESULT [0.0, 2.0, 4.0, 6.0] DEVICES [1, 1, 1, 1] JAX-CONFIGURED 1 INITIALIZED True" in out


def test_a_platform_that_fails_to_start_raises_at_the_first_use():
    out = _run("""
        print("AVAILABLE", torch.accelerator.is_available())
        from torch_tpu.runtime import platform
        for t in platform._BACKGROUND:
            t.join(60)
        try:
            torch.ones(2, device="tpu").cpu()
            print("NO-RAISE")
        except RuntimeError as e:
            print("RAISED", str(e)[:200])
    """, env={"TORCH_TPU_PLATFORM": "cuda", "JAX_PLATFORMS": "cpu"})
    assert "AVAILABLE True" in out
    assert "RAISED TORCH_TPU_PLATFORM='cuda' was requested but JAX finds no cuda device" in out


def test_a_fork_while_the_platform_starts_raises_in_the_child_and_the_parent_goes_on():
    out = _run("""
        import os, signal, threading, time
        from torch_tpu.runtime import platform
        gate = threading.Event()
        real_local_devices = platform._local_devices
        def slow_local_devices():
            gate.wait(30)
            return real_local_devices()
        platform._local_devices = slow_local_devices
        torch.accelerator.is_available()  # the start thread now holds the platform's lock
        time.sleep(0.2)
        pid = os.fork()
        if pid == 0:
            try:
                torch.ones(2, device="tpu").cpu()
                os.write(1, b"CHILD-RAN\\n")
            except Exception as e:
                os.write(1, f"CHILD-RAISED {type(e).__name__}: {e}\\n".encode())
            os._exit(0)
        deadline = time.time() + 30
        while time.time() < deadline:
            if os.waitpid(pid, os.WNOHANG)[0]:
                break
            time.sleep(0.1)
        else:
            os.kill(pid, signal.SIGKILL); os.waitpid(pid, 0); print("CHILD-HANG")
        gate.set()
        print("PARENT", (torch.ones(2, device="tpu") * 3).cpu().tolist())
    """)
    assert "CHILD-HANG" not in out
    assert "CHILD-RAISED ForkedProcessError: torch_tpu: cannot use the tpu device in a forked subprocess" in out
    assert "PARENT [3.0, 3.0]" in out
