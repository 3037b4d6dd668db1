"""What a new user meets first: colours only on a terminal, BEAM's progress, the slow-fallback hint, plugin typos."""
from __future__ import annotations
import io
import os
import pty
import select
import subprocess
import sys
import time
import pytest
from subprocess_checks import run_checked
from tinyplug.helpers import colored, use_color

ESC = "\x1b["


def clean_env(**extra: str) -> dict[str, str]:
  env = {k: v for k, v in os.environ.items()
         if k not in ("TINY_PLUGINS", "TINY_PLUGINS_AUTOLOAD", "VIZ", "DEV", "NO_COLOR", "FORCE_COLOR", "DEBUG", "BEAM")}
  env.update(extra)
  return env


class FakeTerminal(io.StringIO):
  def isatty(self) -> bool: return True


def test_colors_follow_the_stream_and_the_standard_variables(monkeypatch):
  monkeypatch.delenv("NO_COLOR", raising=False); monkeypatch.delenv("FORCE_COLOR", raising=False)
  assert not use_color(io.StringIO()) and use_color(FakeTerminal())
  assert colored("x", "red", stream=io.StringIO()) == "x" and colored("x", "red", stream=FakeTerminal()) == "\x1b[31mx\x1b[0m"
  monkeypatch.setenv("NO_COLOR", "1")
  assert colored("x", "red", stream=FakeTerminal()) == "x"
  monkeypatch.setenv("NO_COLOR", "")   # an empty NO_COLOR does not count
  assert use_color(FakeTerminal())
  monkeypatch.setenv("FORCE_COLOR", "1")
  assert colored("x", "red", stream=io.StringIO()) != "x"
  monkeypatch.setenv("NO_COLOR", "1")   # NO_COLOR wins over FORCE_COLOR
  assert colored("x", "red", stream=FakeTerminal()) == "x"
  monkeypatch.delenv("NO_COLOR")
  monkeypatch.setenv("FORCE_COLOR", "0")
  assert not use_color(io.StringIO())


def test_piped_debug_output_and_cli_have_no_escape_codes(tmp_path):
  code = "from tinyplug import Tensor; (Tensor([1.0, 2.0]) + 1).realize()"
  piped = run_checked([sys.executable, "-c", code], env=clean_env(DEBUG="2"), timeout=120)
  assert "***" in piped.stdout and ESC not in piped.stdout
  forced = run_checked([sys.executable, "-c", code], env=clean_env(DEBUG="2", FORCE_COLOR="1"), timeout=120)
  assert ESC in forced.stdout
  table = run_checked([sys.executable, "-m", "tinyplug", "list-plugins"], env=clean_env(), timeout=120)
  assert "cpu_llvm" in table.stdout and ESC not in table.stdout


def run_in_terminal(argv: list[str], env: dict[str, str], timeout: float = 300) -> str:
  """Run `argv` with stdout and stderr on a pseudo-terminal; everything it printed."""
  leader, follower = pty.openpty()
  proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=follower, stderr=follower, close_fds=True)
  os.close(follower)
  chunks, deadline = [], time.monotonic() + timeout
  try:
    while time.monotonic() < deadline:
      ready, _, _ = select.select([leader], [], [], 0.5)
      if ready:
        try: data = os.read(leader, 65536)
        except OSError: break   # the terminal closed: the child exited
        if not data: break
        chunks.append(data)
      elif proc.poll() is not None: break
  finally:
    if proc.poll() is None: proc.kill()
    proc.wait(30)
    os.close(leader)
  assert proc.returncode == 0, b"".join(chunks).decode(errors="replace")
  return b"".join(chunks).decode(errors="replace")


BEAM_SCRIPT = "from tinyplug import Tensor; print((Tensor.ones(8, 8).contiguous() + 1).sum().item())"


def test_beam_shows_progress_on_a_terminal_only(tmp_path):
  env = clean_env(BEAM="1", IGNORE_BEAM_CACHE="1", TINYPLUG_CACHE_DIR=str(tmp_path))
  shown = run_in_terminal([sys.executable, "-c", BEAM_SCRIPT], env)
  assert "128.0" in shown
  assert "beam=1 CPU kernel" in shown and "timing the starting points" in shown and "candidates" in shown
  piped = run_checked([sys.executable, "-c", BEAM_SCRIPT], env=env, timeout=300)
  assert "128.0" in piped.stdout and "candidates" not in piped.stderr and "\r" not in piped.stderr


def test_automatic_fallback_to_the_python_interpreter_says_how_to_get_a_fast_device():
  code = "from tinyplug import Tensor; print((Tensor([1, 2]) + 1).tolist()); print((Tensor([3]) * 2).tolist())"
  only_builtin = run_checked([sys.executable, "-c", code], env=clean_env(TINY_PLUGINS_AUTOLOAD="0"), timeout=120)
  assert only_builtin.stdout.split() == ["[2,", "3]", "[6]"]
  hint = [line for line in only_builtin.stderr.splitlines() if "PYTHON reference interpreter" in line]
  assert len(hint) == 1 and "pip install 'tinyplug[cpu]'" in hint[0]
  chosen = run_checked([sys.executable, "-c", code], env=clean_env(DEV="PYTHON"), timeout=120)
  assert "reference interpreter" not in chosen.stderr
  default = run_checked([sys.executable, "-c", code], env=clean_env(), timeout=120)
  assert "reference interpreter" not in default.stderr


@pytest.mark.parametrize("request_text", ["cpu", "viz"])
def test_an_extra_name_in_tiny_plugins_suggests_the_plugin_id(request_text):
  done = subprocess.run([sys.executable, "-c", "from tinyplug import Tensor; Tensor([1]).realize()"],
                        env=clean_env(TINY_PLUGINS=request_text), capture_output=True, text=True, timeout=120)
  want = {"cpu": "cpu_llvm", "viz": "viz_web"}[request_text]
  assert done.returncode != 0 and f"did you mean {want!r}?" in done.stderr
  assert f"the plugin id is {want!r}" in done.stderr


def test_disabling_an_extra_name_warns_instead_of_doing_nothing_silently():
  done = run_checked([sys.executable, "-c", "from tinyplug import Device; print(Device.DEFAULT)"],
                     env=clean_env(TINY_PLUGINS="-cpu"), timeout=120)
  assert "TINY_PLUGINS=-cpu names no installed plugin (did you mean 'cpu_llvm'?" in done.stderr


def test_the_user_guide_training_loop_runs_as_written(tmp_path):
  """docs/user_guide.md's training loop is run exactly as the page shows it: it learns, saves and reloads."""
  from plugin_fixtures import REPO_ROOT
  text = (REPO_ROOT / "docs" / "user_guide.md").read_text()
  code = text.split("```python\n", 1)[1].split("```", 1)[0]
  done = run_checked([sys.executable, "-c", code], cwd=tmp_path, env=clean_env(), timeout=600)
  accuracy = float(done.stdout.split("train accuracy ")[1].split("%")[0])
  assert accuracy > 90 and "reloaded the weights" in done.stdout and (tmp_path / "mlp.safetensors").exists()
