"""`tinyplug hello`: imported only when the command runs."""
import argparse


def hello(args: argparse.Namespace) -> int:
  print(f"hello, {args.name}, from the tinyplug example plugin")
  return 0
