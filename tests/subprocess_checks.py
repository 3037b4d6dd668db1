"""Running a child process in a test so that its failure shows what it printed."""
from __future__ import annotations
import subprocess


def run_checked(cmd: list[str], **kw) -> subprocess.CompletedProcess:
  """`subprocess.run` with text output captured; a non-zero exit fails the test with the command's stdout and stderr."""
  done = subprocess.run(cmd, capture_output=True, text=True, **kw)
  assert done.returncode == 0, f"{' '.join(cmd)} exited {done.returncode}\n--- stdout\n{done.stdout}\n--- stderr\n{done.stderr}"
  return done
