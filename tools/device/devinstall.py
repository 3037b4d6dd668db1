"""Make the checkout's distributions importable with their entry points, without pip or setuptools: a dist-info
(METADATA + entry_points.txt) per pyproject and one .pth naming the source folders, in the given site dir."""
import os, re, sys, tomllib
site, projects = sys.argv[1], sys.argv[2:]
paths = []
for proj in projects:
  data = tomllib.load(open(os.path.join(proj, "pyproject.toml"), "rb"))
  p = data["project"]
  where = data.get("tool", {}).get("setuptools", {}).get("packages", {}).get("find", {}).get("where", ["."])
  paths += [os.path.abspath(os.path.join(proj, w)) for w in where]
  info = os.path.join(site, f"{re.sub(r'[-.]+', '_', p['name'])}-{p['version']}.dist-info")
  os.makedirs(info, exist_ok=True)
  open(os.path.join(info, "METADATA"), "w").write(f"Metadata-Version: 2.1\nName: {p['name']}\nVersion: {p['version']}\n")
  eps = p.get("entry-points", {})
  open(os.path.join(info, "entry_points.txt"), "w").write(
    "".join(f"[{g}]\n" + "".join(f"{k} = {v}\n" for k, v in e.items()) + "\n" for g, e in eps.items()))
  if p.get("scripts"): open(os.path.join(info, "entry_points.txt"), "a").write(
    "[console_scripts]\n" + "".join(f"{k} = {v}\n" for k, v in p["scripts"].items()))
open(os.path.join(site, "tinyplug_dev.pth"), "w").write("\n".join(dict.fromkeys(paths)) + "\n")
print("installed", [os.path.basename(x) for x in projects], "->", site)
