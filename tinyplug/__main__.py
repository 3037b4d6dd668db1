"""`python -m tinyplug ...` is the same as the `tinyplug` command."""
import sys

from tinyplug.cli import main

sys.exit(main())
