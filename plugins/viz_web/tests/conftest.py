import os, sys
sys.path.insert(0, os.path.dirname(__file__))
import pytest
import tracegen

@pytest.fixture(scope="session")
def small_trace(tmp_path_factory):
  """The seed's first example, plus a kernel with simplifications: two contexts with rewrites, code and a profile."""
  folder = str(tmp_path_factory.mktemp("viz") / "run-small")
  from tinyplug.plugins import get_plugin_manager
  get_plugin_manager()   # load plugins first so the whole run is traced
  with tracegen.recording(folder, "run-small"):
    tracegen.add_two_vectors()
    tracegen.simplify_example()
  return folder

@pytest.fixture(scope="session")
def big_trace(tmp_path_factory):
  folder = str(tmp_path_factory.mktemp("viz") / "run-big")
  with tracegen.recording(folder, "run-big"):
    tracegen.big_rewrite()
  return folder
