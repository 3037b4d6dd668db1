"""The shipped op suite (tinyplug/testing/test_ops.py) on every device under test (tests/conftest.py's `device`)."""
from tinyplug.testing.test_ops import *  # noqa: F401,F403
