"""Packaging: wheels of every distribution in the repository (the core and each plugins/<id>) go into a wheelhouse,
and `pip install 'tinyplug[cuda,viz]'` from it into a fresh venv, with no index, gives the core, the cuda plugin and
the visualizer, which `tinyplug list-plugins` then shows with their statuses.

Offline: third-party requirements (numpy, pluggy, NVIDIA's wheels, starlette, ...) come from this test environment's
site-packages through a .pth file pointing at a copy of it without tinyplug's own distributions, so pip must take
tinyplug, tinyplug-cuda and tinyplug-viz-web from the wheelhouse."""
from __future__ import annotations
import json, os, shutil, subprocess, sys, sysconfig, venv
from pathlib import Path
import pytest

REPO = Path(__file__).resolve().parents[1]
SKIP = shutil.ignore_patterns("build", "*.egg-info", "__pycache__", "tests", ".venv", "*.so")

def sources(tmp: Path) -> dict[str, Path]:
  """A clean copy of each distribution's source (building in place would leave build/ and egg-info in the checkout)."""
  core = tmp / "src" / "tinyplug"
  core.mkdir(parents=True)
  shutil.copytree(REPO / "tinyplug", core / "tinyplug", ignore=SKIP)
  for name in ("pyproject.toml", "README.md"): shutil.copy(REPO / name, core / name)
  out = {"tinyplug": core}
  for plugin in sorted(p for p in (REPO / "plugins").iterdir() if (p / "pyproject.toml").exists()):
    out[plugin.name] = tmp / "src" / plugin.name
    shutil.copytree(plugin, out[plugin.name], ignore=SKIP)
  return out

def third_party_site(tmp: Path) -> Path:
  """This environment's site-packages without tinyplug's distributions (links to everything else)."""
  site, view = Path(sysconfig.get_paths()["purelib"]), tmp / "third_party"
  view.mkdir()
  for entry in site.iterdir():
    if "tinyplug" in entry.name.lower() or entry.name.startswith("__editable__"): continue
    (view / entry.name).symlink_to(entry)
  return view

def run(cmd: list[str], env: dict, timeout: int = 600) -> subprocess.CompletedProcess:
  out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout, cwd="/")
  assert out.returncode == 0, f"{' '.join(cmd)}\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
  return out

@pytest.mark.slow
def test_wheelhouse_installs_tinyplug_cuda_viz_offline(tmp_path):
  env = {k: v for k, v in os.environ.items() if k not in ("TINY_PLUGINS", "VIZ", "PYTHONPATH", "DEV")}
  wheelhouse = tmp_path / "wheelhouse"
  srcs = sources(tmp_path)
  run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "--no-index", "-w", str(wheelhouse),
       *map(str, srcs.values())], env)
  built = sorted(p.name.split("-")[0] for p in wheelhouse.glob("*.whl"))
  assert built == sorted(["tinyplug", *(f"tinyplug_{name}" for name in srcs if name != "tinyplug")]), built
  assert {"tinyplug_cuda", "tinyplug_viz_web"} <= set(built)
  env_dir = tmp_path / "venv"
  venv.create(env_dir, system_site_packages=False, with_pip=False)
  python = str(env_dir / "bin" / "python")
  site_dir = run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], env).stdout.strip()
  (Path(site_dir) / "third_party.pth").write_text(f"import site; site.addsitedir({str(third_party_site(tmp_path))!r})\n")
  run([python, "-m", "pip", "install", "-q", "--no-index", "--find-links", str(wheelhouse), "tinyplug[cuda,viz]"], env)
  installed = run([python, "-m", "pip", "list", "--format=json"], env).stdout
  where = {p["name"]: p for p in json.loads(installed)}
  for dist in ("tinyplug", "tinyplug-cuda", "tinyplug-viz-web"):
    assert dist in where and "editable_project_location" not in where[dist], dist
  assert "tinyplug-cpu-llvm" not in where and "tinyplug-opencl" not in where   # only what the extras name
  out = run([str(env_dir / "bin" / "tinyplug"), "list-plugins", "--json"], env).stdout
  plugins = {p["id"]: p for p in json.loads(out)["plugins"]}
  assert plugins["cuda"]["distribution"] == "tinyplug-cuda"
  assert plugins["cuda"]["status"] in ("active", "unavailable")   # unavailable without an NVIDIA driver, with the reason
  if plugins["cuda"]["status"] == "unavailable": assert "libcuda.so.1" in plugins["cuda"]["reason"]
  assert plugins["viz_web"]["status"] == "opt-in" and plugins["viz_web"]["distribution"] == "tinyplug-viz-web"
  # the installed cuda plugin compiles with NVRTC from its wheel dependency, not from this checkout
  code = ("import tinyplug_cuda, sys; from tinyplug_cuda import nvrtc; "
          "print(tinyplug_cuda.__file__); print(len(nvrtc.compile_cuda('extern \"C\" __global__ void k() {}', 'sm_80')))")
  file, size = run([python, "-c", code], env).stdout.split()
  assert str(REPO) not in file and int(size) > 0
