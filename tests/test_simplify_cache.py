"""Kernel simplification on disk (schedule/simplify_cache.py): a warm start read every kernel's simplified AST back
instead of rewriting it again (the largest part of a warm first step's scheduling). What comes back must be the very
graph the rewrite makes; a damaged or unusable entry is dropped and the rewrite runs."""
import numpy as np
import tinyplug.schedule as sched
from tinyplug import Tensor
from tinyplug.helpers import Context
from tinyplug.schedule import simplify_cache
from tinyplug.uop.rewrite import graph_rewrite
from tinyplug.uop.symbolic import symbolic

def _unsimplified_asts(monkeypatch) -> list:
  seen = []
  sched._templates.clear(); sched._simplified.clear()   # schedule these graphs afresh, as a new process would
  monkeypatch.setattr(sched.template_cache, "load", lambda key: None)   # (without the schedules on disk)
  real = sched._simplify_kernel
  monkeypatch.setattr(sched, "_simplify_kernel", lambda ast: (seen.append(ast), real(ast))[1])
  a = Tensor(np.arange(48, dtype=np.float32).reshape(6, 8))
  outs = [a.pad(((1, 2), (0, 3))).sum(1), a.reshape(8, 6).permute(1, 0)[1:5].max(0), a.flip(0).cumsum(1)]
  for o in outs: sched.create_schedule([o.uop])
  assert len(seen) >= 3
  return seen

def test_read_back_is_the_rewrites_graph(tmp_path, monkeypatch):
  monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
  for ast in _unsimplified_asts(monkeypatch):
    want = graph_rewrite(ast, symbolic)
    key = simplify_cache.simplify_key(ast)
    assert key is not None and simplify_cache.load(key) is want   # stored by the scheduling: the same interned graph
    simplify_cache.SIMPLIFIED.delete(key)
    assert simplify_cache.load(key) is None
    simplify_cache.store(key, want)
    assert simplify_cache.load(key) is want

def test_off_without_the_disk_cache(monkeypatch):
  ast = _unsimplified_asts(monkeypatch)[0]
  with Context(CACHELEVEL=0): assert simplify_cache.simplify_key(ast) is None

def test_an_unusable_entry_is_dropped_and_rewritten(tmp_path, monkeypatch, capfd):
  monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
  ast = _unsimplified_asts(monkeypatch)[0]
  key = simplify_cache.simplify_key(ast)
  bad = b'[["NOT_AN_OP", ["float", 1], null, []]]'   # its digest matches: intact but unusable
  simplify_cache.SIMPLIFIED.put(key, bad)
  assert simplify_cache.load(key) is None
  assert "unreadable graph" in capfd.readouterr().err
  assert simplify_cache.SIMPLIFIED.get(key) is None   # dropped
  sched._simplified.pop(ast, None)
  assert sched._simplify_kernel(ast) is graph_rewrite(ast, symbolic)   # rewritten, and stored again
  assert simplify_cache.load(key) is graph_rewrite(ast, symbolic)
