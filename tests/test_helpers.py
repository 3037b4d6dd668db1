"""tinyplug.helpers: environment reading, ContextVar/Context, counters and small utilities."""
from __future__ import annotations

import re
import sys
import uuid
from pathlib import Path

import pytest
from subprocess_checks import run_checked

from tinyplug import helpers
from tinyplug.helpers import (BEAM, CACHELEVEL, DEBUG, ENV_VARS, JIT, NOOPT, SEARCH, Context, ContextVar, GlobalCounters,
                              Timing, all_int, all_same, ansilen, ansistrip, argsort, cache_dir, cdiv, ceildiv, cmod,
                              colored, dedup, env_str, flatten, fully_flatten, getenv, make_tuple, partition, prod,
                              round_up, strip_parens, suggest, to_function_name, unwrap)

REPO_ROOT = Path(__file__).resolve().parents[1]


def fresh_key() -> str:
  return f"TINYPLUG_TEST_{uuid.uuid4().hex[:8].upper()}"  # getenv is cached per key, so every test uses new keys


@pytest.mark.parametrize("raw,default,expected", [
  ("3", 0, 3), ("", 0, 0), (" 7 ", 1, 7), ("2.5", 0.0, 2.5), ("abc", "", "abc"),
  ("1", False, True), ("yes", False, True), ("0", True, False), ("off", True, False), ("", True, False),
])
def test_getenv_casts_to_the_type_of_default(monkeypatch, raw, default, expected):
  key = fresh_key()
  monkeypatch.setenv(key, raw)
  value = getenv(key, default)
  assert value == expected and type(value) is type(default)


def test_getenv_default_when_unset_and_cached():
  key = fresh_key()
  assert getenv(key) == 0 and getenv(key, "x") == "x"
  import os
  os.environ[key] = "5"
  try:
    assert getenv(key) == 0        # cached: read once per process
    assert env_str(key) == "5"     # env_str is read fresh
  finally:
    del os.environ[key]


def test_getenv_rejects_garbage(monkeypatch):
  key = fresh_key()
  monkeypatch.setenv(key, "two")
  with pytest.raises(ValueError, match=key):
    getenv(key, 0)
  with pytest.raises(ValueError, match="boolean"):
    getenv(key, False)


def test_context_var_reads_environment_and_compares(monkeypatch):
  key = fresh_key()
  monkeypatch.setenv(key, "3")
  var = ContextVar(key, 0, "test var")
  try:
    assert var.value == 3 and var >= 2 and var > 2 and var < 4 and var <= 3 and var == 3 and var != 4
    assert bool(var) and int(var) == 3 and [0, 1, 2, 3][var] == 3
    assert ContextVar(key, 0) is var  # redeclaring with the same default returns the same object
    with pytest.raises(ValueError, match="already declared"):
      ContextVar(key, "other")
    assert ENV_VARS[key].kind == "context" and ENV_VARS[key].doc == "test var"
  finally:
    ContextVar.registry.pop(key, None)
    ENV_VARS.pop(key, None)


def test_module_level_vars_have_documented_defaults():
  assert JIT.default == 1 and CACHELEVEL.default == 2 and SEARCH.default == "beam"
  for var in (DEBUG, NOOPT, BEAM):
    assert var.default == 0 and var.key in ContextVar.registry
  assert "DEV" in ENV_VARS and "DEV" not in ContextVar.registry


def test_context_manager_sets_and_restores():
  before = (DEBUG.value, NOOPT.value)
  with Context(DEBUG=4, NOOPT=1) as ctx:
    assert DEBUG.value == 4 and NOOPT >= 1 and isinstance(ctx, Context)
    with Context(DEBUG=1):
      assert DEBUG.value == 1
    assert DEBUG.value == 4
  assert (DEBUG.value, NOOPT.value) == before


def test_context_restores_on_exception():
  before = BEAM.value
  with pytest.raises(RuntimeError):
    with Context(BEAM=8):
      assert BEAM.value == 8
      raise RuntimeError("inside")
  assert BEAM.value == before


def test_context_as_decorator_including_recursion_and_exceptions():
  before = NOOPT.value

  @Context(NOOPT=7)
  def depth(n: int) -> int:
    assert NOOPT.value == 7
    return 0 if n == 0 else 1 + depth(n - 1)

  assert depth(3) == 3 and NOOPT.value == before

  @Context(NOOPT=9)
  def boom():
    raise KeyError("x")

  with pytest.raises(KeyError):
    boom()
  assert NOOPT.value == before


def test_context_unknown_name_is_an_error_naming_it():
  with pytest.raises(KeyError, match="DEBUGG") as e:
    Context(DEBUGG=1)
  assert "did you mean 'DEBUG'" in str(e.value)


def test_global_counters_reset_keeps_mem_used(monkeypatch):
  for name, value in (("global_ops", 10), ("global_mem", 20), ("time_sum_s", 1.5), ("kernel_count", 3), ("mem_used", 99)):
    monkeypatch.setattr(GlobalCounters, name, value)
  GlobalCounters.reset()
  assert (GlobalCounters.global_ops, GlobalCounters.global_mem, GlobalCounters.time_sum_s, GlobalCounters.kernel_count) \
    == (0, 0, 0.0, 0)
  assert GlobalCounters.mem_used == 99


def test_sequence_utilities():
  assert prod([2, 3, 4]) == 24 and prod([]) == 1
  assert flatten([[1, 2], [], [3]]) == [1, 2, 3] and fully_flatten([[1, [2, (3,)]], 4]) == [1, 2, 3, 4]
  assert dedup([3, 1, 3, 2, 1]) == [3, 1, 2]
  assert all_same([1, 1, 1]) and all_same([]) and not all_same([1, 2])
  assert all_int((1, 2)) and not all_int((1, 2.0))
  assert argsort([30, 10, 20]) == [1, 2, 0]
  assert partition(range(6), lambda x: x % 2 == 0) == ([0, 2, 4], [1, 3, 5])
  assert make_tuple(3, 2) == (3, 3) and make_tuple([1, 2], 2) == (1, 2)
  assert unwrap(0) == 0
  with pytest.raises(ValueError):
    unwrap(None)


@pytest.mark.parametrize("x,y", [(7, 2), (-7, 2), (7, -2), (-7, -2), (6, 3), (0, 5), (-1, 3)])
def test_c_style_division(x, y):
  import math
  assert cdiv(x, y) == math.trunc(x / y)
  assert cmod(x, y) == x - math.trunc(x / y) * y and math.fmod(x, y) == cmod(x, y)


def test_rounding():
  assert cdiv(5, 0) == 0
  assert ceildiv(7, 2) == 4 and ceildiv(-7, 2) == -3 and ceildiv(8, 2) == 4
  assert round_up(10, 4) == 12 and round_up(12, 4) == 12 and round_up(0, 4) == 0


def test_text_utilities(monkeypatch):
  monkeypatch.delenv("NO_COLOR", raising=False)
  monkeypatch.setenv("FORCE_COLOR", "1")   # pytest's stdout is no terminal
  red = colored("hi", "red")
  assert red != "hi" and ansistrip(red) == "hi" and ansilen(red) == 2
  assert colored("hi", "RED") != red and colored("hi", None) == "hi"
  monkeypatch.setenv("NO_COLOR", "1")
  assert colored("hi", "red") == "hi"
  assert to_function_name("r_4_4") == "r_4_4" and re.fullmatch(r"\w+", to_function_name("E_(4)+x.y"))
  assert to_function_name(colored("k", "green")) == "k"
  assert strip_parens("(a+b)") == "a+b" and strip_parens("(a)+(b)") == "(a)+(b)" and strip_parens("a") == "a"
  assert suggest("DEBUGG", ["DEBUG", "BEAM"]) == " (did you mean 'DEBUG'?)" and suggest("zzz", ["DEBUG"]) == ""


def test_cache_dir_respects_xdg(monkeypatch, tmp_path):
  monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
  assert cache_dir() == str(tmp_path / "tinyplug")
  monkeypatch.delenv("XDG_CACHE_HOME")
  assert cache_dir().endswith(".cache/tinyplug")


def test_timing(capsys):
  with Timing("work ") as t:
    sum(range(1000))
  assert t.elapsed_s > 0 and re.fullmatch(r"work\s+\d+\.\d\d ms\n", capsys.readouterr().out)
  with Timing(enabled=False, on_exit=lambda ns: "!"):
    pass
  assert capsys.readouterr().out == ""


def test_platform_flags():
  assert helpers.LINUX == sys.platform.startswith("linux") and helpers.OSX == (sys.platform == "darwin")


def test_every_variable_is_documented_in_env_vars_md():
  text = (REPO_ROOT / "docs" / "env_vars.md").read_text()
  import tinyplug.plugins  # noqa: F401  (declares nothing new today, but plugins' variables must be listed too)
  missing = [name for name, doc in ENV_VARS.items() if not name.startswith("TINYPLUG_TEST_") and f"`{name}`" not in text]
  assert not missing, f"add these to docs/env_vars.md: {missing}"


def test_helpers_import_is_stdlib_only():
  code = ("import sys; import tinyplug.helpers; "
          "print(','.join(sorted(m for m in sys.modules if m.split('.')[0] in ('numpy', 'pluggy'))))")
  out = run_checked([sys.executable, "-c", code], cwd=REPO_ROOT).stdout
  assert out.strip() == ""
