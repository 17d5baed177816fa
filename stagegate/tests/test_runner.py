"""stagegate run: real commands, real exits, timeouts and signals; the record is always written."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

from stagegate.collect import load_record
from stagegate.runner import TAIL_CHARS, run_stage

PY = sys.executable


def _run(tmp_path: Path, *cmd: str, **kw: object) -> tuple:
    out, err = io.StringIO(), io.StringIO()
    record, code = run_stage("execution", list(cmd), out_dir=tmp_path, stdout=out, stderr=err, **kw)
    return record, code, out.getvalue(), err.getvalue()


def test_success_is_recorded_with_output_and_environment(tmp_path: Path) -> None:
    record, code, out, _ = _run(tmp_path, PY, "-c", "print('héllo ✓')", files={"junit": "j.xml"})
    assert code == 0 and record.exit_code == 0 and record.succeeded
    assert "héllo ✓" in out and "héllo ✓" in record.stdout_tail  # streamed and kept
    saved = load_record(tmp_path / "execution.json")
    assert saved == record
    assert saved.files == {"junit": "j.xml"} and saved.environment["python"]
    assert saved.start.endswith("Z") and saved.duration_s >= 0


def test_failure_keeps_the_exit_code_and_stderr(tmp_path: Path) -> None:
    record, code, _, err = _run(
        tmp_path, PY, "-c", "import sys; sys.stderr.write('boom\\n'); sys.exit(3)"
    )
    assert code == 3 and record.exit_code == 3 and not record.succeeded
    assert "boom" in err and "boom" in record.stderr_tail


def test_timeout_stops_the_command_and_is_recorded(tmp_path: Path) -> None:
    record, code, _, err = _run(tmp_path, PY, "-c", "import time; time.sleep(60)", timeout_s=0.5)
    assert code == 124 and record.timed_out and record.exit_code is None
    assert record.duration_s < 30 and "timed out" in err
    assert json.loads((tmp_path / "execution.json").read_text())["timed_out"] is True


def test_a_killed_command_records_its_signal(tmp_path: Path) -> None:
    record, code, _, _ = _run(
        tmp_path, PY, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"
    )
    assert record.signal == 9 and record.exit_code is None and code == 128 + 9


def test_a_command_that_cannot_start_is_recorded(tmp_path: Path) -> None:
    record, code, _, err = _run(tmp_path, "/no/such/tool", "--flag")
    assert code == 127 and record.error and "cannot start" in err
    assert load_record(tmp_path / "execution.json").error == record.error


def test_output_tail_is_bounded(tmp_path: Path) -> None:
    record, code, out, _ = _run(
        tmp_path, PY, "-c", "print('x' * 100 + '\\n' * 0, end=''); [print(i) for i in range(50000)]"
    )
    assert code == 0 and "49999" in record.stdout_tail
    assert (
        len(record.stdout_tail) <= TAIL_CHARS + 100 and "earlier output cut" in record.stdout_tail
    )
    assert out.count("\n") == 50000  # the console still got everything
