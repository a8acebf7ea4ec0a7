"""on_stop_signals: a stop signal's handler runs on a thread of its own, so it may take a lock the main thread
holds when the signal comes (``Event.set`` while the main thread is inside ``Event.wait``), and it runs
whichever thread the kernel gave the signal to.
"""

from __future__ import annotations

import signal
import threading

import pytest

from piper_recorder.process.supervision import STOP_SIGNALS, on_stop_signals


@pytest.fixture
def restore_signals():
    """Give the test process its stop handlers and wakeup fd back after the test installed its own."""
    saved = {sig: signal.getsignal(sig) for sig in STOP_SIGNALS}
    yield
    signal.set_wakeup_fd(-1)
    for sig, previous in saved.items():
        signal.signal(sig, previous)


@pytest.mark.timeout(20)
@pytest.mark.usefixtures("restore_signals")
def test_a_stop_signal_while_the_main_thread_holds_the_handlers_lock_is_handled_once_it_is_released():
    lock = threading.Lock()
    calls: list[tuple[int, bool]] = []
    done = threading.Event()

    def handler(signum: int) -> None:
        with lock:  # as Event.set takes the lock of the Event.wait the main thread may be in
            calls.append((signum, threading.current_thread() is threading.main_thread()))
        done.set()

    on_stop_signals(handler)
    with lock:
        signal.raise_signal(signal.SIGHUP)  # Python runs its handler in this thread, inside this block
        assert not done.wait(0.2)  # the handler waits for the lock; the main thread goes on
    assert done.wait(5.0)
    assert calls == [(signal.SIGHUP, False)]


@pytest.mark.timeout(20)
@pytest.mark.usefixtures("restore_signals")
def test_a_stop_signal_taken_by_another_thread_reaches_the_handler_while_the_main_thread_waits():
    # The kernel gives a process's signal to any thread; the eval loop of CPython 3.11 and 3.12 lets a thread
    # other than the main one clear the "signals pending" flag, so a Python-level handler waits for the next
    # signal that the main thread itself takes. The stop must arrive anyway, at once.
    got = threading.Event()
    quit_busy = threading.Event()

    def busy() -> None:
        while not quit_busy.is_set():  # runs bytecode, so it passes the eval loop's checks
            pass

    worker = threading.Thread(target=busy, daemon=True)
    try:
        on_stop_signals(lambda _sig: got.set())
        worker.start()
        assert worker.ident is not None
        signal.pthread_kill(worker.ident, signal.SIGHUP)
        assert got.wait(5.0)  # the main thread sits in a lock wait all along
    finally:
        quit_busy.set()
        worker.join()
