"""The functions' stdout goes to a log file while a local stack runs, and the file is closed before the
process ends: a daemon thread still printing (an asynchronous invocation under way at the stop) then
fails in its own thread instead of holding the file's lock while the interpreter shuts down (a stack
stopped in a loaded CI run ended with ``Fatal Python error: _enter_buffered_busy``, exit -6)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from sluice_local.emulation.up import function_output


def test_given_the_block_when_it_ends_then_stdout_is_restored_and_the_file_is_closed(tmp_path: Path) -> None:
    before = sys.stdout
    with function_output(tmp_path / "logs" / "functions.log") as console:
        assert console is before
        print('{"level": "INFO", "message": "from a function"}')
        redirected = sys.stdout
    assert sys.stdout is before
    assert redirected.closed
    assert (
        tmp_path / "logs" / "functions.log"
    ).read_text() == '{"level": "INFO", "message": "from a function"}\n'


def test_given_an_earlier_run_when_a_new_one_starts_then_its_file_holds_its_own_lines(tmp_path: Path) -> None:
    log = tmp_path / "functions.log"
    with function_output(log):
        print("first run")
    with function_output(log):
        print("second run")
    assert log.read_text() == "second run\n"
    assert (tmp_path / "functions.log.1").read_text() == "first run\n"


def test_given_daemon_threads_still_printing_when_the_process_ends_then_it_exits_cleanly(
    tmp_path: Path,
) -> None:
    # Given a process whose daemon threads print to the functions' log as fast as they can
    script = textwrap.dedent(
        f"""
        import threading
        from pathlib import Path
        from sluice_local.emulation.up import function_output

        def chatter(printed):
            while True:
                try:
                    print("x" * 200)
                except ValueError:  # the log is closed: this thread's own failure
                    return
                printed.set()

        with function_output(Path({str(tmp_path / "f.log")!r})):
            printed = [threading.Event() for _ in range(8)]
            for event in printed:
                threading.Thread(target=chatter, args=(event,), daemon=True).start()
            assert all(event.wait(30) for event in printed)  # every thread is writing when the block ends
        """
    )
    # When it ends, again and again: Then it exits 0, never aborted at shutdown
    for _ in range(5):
        done = subprocess.run(
            [sys.executable, "-c", script], check=False, capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 0, done.stderr[-2000:]
