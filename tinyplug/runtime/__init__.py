"""Built-in runtimes that ship with the core distribution (registered through entry points like any plugin)."""
