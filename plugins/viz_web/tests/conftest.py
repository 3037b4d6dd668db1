import os, subprocess, sys
sys.path.insert(0, os.path.dirname(__file__))
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))

def record_in_subprocess(folder: str, run: str, *examples: str) -> str:
  """Record tracegen examples in a fresh interpreter: kernel names and the compile cache start empty there,
  whatever other tests in this process did."""
  code = (f"import sys; sys.path.insert(0, {HERE!r})\n"
          "from tinyplug.plugins import get_plugin_manager\nget_plugin_manager()\nimport tracegen\n"
          f"with tracegen.recording({folder!r}, {run!r}):\n" + "".join(f"  tracegen.{e}()\n" for e in examples))
  env = dict(os.environ)
  for k in ("VIZ", "TINY_PLUGINS", "TINYPLUG_VIZ_RUN"): env.pop(k, None)
  subprocess.run([sys.executable, "-c", code], check=True, env=env, timeout=600)
  return folder

@pytest.fixture(scope="session")
def small_trace(tmp_path_factory):
  """The seed's first example, plus a kernel with simplifications: contexts with rewrites, code and a profile."""
  return record_in_subprocess(str(tmp_path_factory.mktemp("viz") / "run-small"), "run-small",
                              "add_two_vectors", "simplify_example")

@pytest.fixture(scope="session")
def big_trace(tmp_path_factory):
  return record_in_subprocess(str(tmp_path_factory.mktemp("viz") / "run-big"), "run-big", "big_rewrite")
