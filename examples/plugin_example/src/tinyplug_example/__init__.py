"""tinyplug-example: a third-party tinyplug plugin. Importing the package imports nothing else."""
__version__ = "0.1.0"
