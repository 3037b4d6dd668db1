"""tinyplug's GPU emulator. Importing the package is free: clang runs and the runtime loads on first use."""
