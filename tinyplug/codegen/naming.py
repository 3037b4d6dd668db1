"""Kernel names live with the scheduler that makes the kernels (`tinyplug.schedule.naming`)."""
from tinyplug.schedule.naming import kernel_name  # noqa: F401
