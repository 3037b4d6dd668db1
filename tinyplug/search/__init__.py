"""Kernel search strategies. This package stays cheap to import (its `plugin` module is an entry point);
the machinery lives in `runner`, the built-in strategies in `strategies`."""
