"""The emulator's settings (declared here so that `tinyplug env` lists them as soon as the plugin is registered)."""
from tinyplug.helpers import ContextVar

EMU_CLANG = ContextVar("EMU_CLANG", "", "the clang the GPU emulator compiles kernels with (default: the newest of clang, "
                       "clang-22 ... clang-15 on PATH) (emulator plugin)")
EMU_ORDER = ContextVar("EMU_ORDER", "forward", "order the GPU emulator runs work-items in between barriers: forward, "
                       "reverse, shuffle, or check (all three; an error when the results differ) (emulator plugin)")
EMU_SEED = ContextVar("EMU_SEED", 0, "seed of the emulator's shuffled work-item order (emulator plugin)")
EMU_BOUNDS = ContextVar("EMU_BOUNDS", 0, "emulator bounds checking: 1 puts an inaccessible page right after every buffer "
                        "allocated from now on (the first access past the end is reported with buffer, index and "
                        "work-item), 2 right before it (emulator plugin)")
EMU_THREADS = ContextVar("EMU_THREADS", 0, "host threads the emulator runs work-groups on; 0: up to 4, one per core "
                         "(emulator plugin)")
EMU_STACK_KB = ContextVar("EMU_STACK_KB", 64, "stack of each emulated work-item, in KiB (emulator plugin)")
