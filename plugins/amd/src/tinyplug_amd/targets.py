"""The AMD GPUs the plugin writes code for: the processor name (`gfx1100`), its wave size and work-group memory, and
the choice of one (the open device's own, else AMD_ARCH, else gfx1100). Only the name and the three tested targets
are known here; any other well-formed `gfxNNNN` is accepted with the defaults of its generation."""
from __future__ import annotations
import re
from dataclasses import dataclass
from tinyplug.helpers import env_str

@dataclass(frozen=True)
class AMDArch:
  name: str          # the LLVM processor: "gfx1100"
  family: str        # "RDNA3", "CDNA3", ...
  wave: int          # work-items per wavefront: 32 (RDNA) or 64 (GCN/CDNA)
  lds: int = 65536   # bytes of work-group (LDS) memory one work-group may use
  wmma: bool = False  # RDNA3's WMMA instructions (v_wmma_f32_16x16x16_f16)

  @property
  def features(self) -> str:
    """llvmlite target-machine features: the wave size, stated rather than left to LLVM's default."""
    return f"+wavefrontsize{self.wave}"

# the targets every test compiles and links for
TESTED = {
  "gfx1100": AMDArch("gfx1100", "RDNA3", 32, wmma=True),
  "gfx942": AMDArch("gfx942", "CDNA3", 64),
  "gfx1201": AMDArch("gfx1201", "RDNA4", 32),
}
DEFAULT_ARCH = "gfx1100"
_NAME = re.compile(r"gfx([0-9]{1,2})([0-9a-f]{2})")

def arch_info(name: str | None = None) -> AMDArch:
  """The target named (a device's `gcnArchName` such as `gfx90a:sramecc+:xnack-` is cut at the first ':'), else
  AMD_ARCH, else gfx1100. A name that is not `gfx` + hex digits is an error naming the variable and the known ones."""
  given = name or env_str("AMD_ARCH") or DEFAULT_ARCH
  proc = given.strip().lower().split(":")[0]
  if proc in TESTED: return TESTED[proc]
  m = _NAME.fullmatch(proc)
  if m is None:
    raise ValueError(f"{given!r} is not an AMD GPU processor name (AMD_ARCH / the device's arch): write gfx followed by "
                     f"its number, e.g. {', '.join(TESTED)}")
  major = int(m.group(1))
  if major < 9: raise ValueError(f"{proc}: GPUs before gfx9 (Vega) are not supported by the amd plugin")
  family = {9: "GCN/CDNA", 10: "RDNA1/2", 11: "RDNA3", 12: "RDNA4"}.get(major, f"gfx{major}")
  return AMDArch(proc, family, 64 if major == 9 else 32, wmma=major == 11)
