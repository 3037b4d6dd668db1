"""Registration module of the `viz_tools` plugin: the `tinyplug viz` command (serve, cli, export).

It is on by default so that a saved trace can be opened without turning the recorder on."""
from tinyplug.hookspecs import CommandSpec, hookimpl

TINYPLUG_PLUGIN = {"api": "1.0", "activation": "default", "description": "`tinyplug viz`: open, export and clean saved traces"}

TRACE_HELP = "a trace folder or one trace-<pid>.jsonl.z file (default: the latest run under the tinyplug cache)"

def add_arguments(parser):
  sub = parser.add_subparsers(dest="viz_command", metavar="SUBCOMMAND")
  p = sub.add_parser("serve", help="open a trace in the web UI (127.0.0.1 only)")
  p.add_argument("trace", nargs="?", help=TRACE_HELP)
  p.add_argument("--port", type=int, default=None, help="port to listen on (default: VIZ_PORT, else a free one)")
  p = sub.add_parser("cli", help="print a trace as text: schedules, kernels, rewrites, code, profile")
  p.add_argument("trace", nargs="?", help=TRACE_HELP)
  p.add_argument("-s", "--src", metavar="NAME", help="a context (schedule or kernel), a device track, or TINY (all contexts)")
  p.add_argument("-i", "--item", nargs="+", metavar="ITEM", default=[],
                 help="narrow the selection: a context, then a rewrite step (pass name), then a match number")
  p.add_argument("--json", action="store_true", help="JSON lines: kernels with timings, AST and code (for scripts)")
  p.add_argument("--list", "--ls", action="store_true", help="list contexts (or, with -s, the steps of one)")
  p.add_argument("--why", nargs=2, metavar=("KERNEL_A", "KERNEL_B"),
                 help="with -s SCHEDULE: why these two kernels (names or numbers) were not fused into one")
  p.add_argument("-k", "--kernels", nargs="?", const="time_ns", metavar="SORT",
                 choices=("time_ns", "gflops", "gbs", "runs", "name", "ops", "mem"),
                 help="the kernel table (as DEBUG=2 prints it) of the trace, or of the schedule given with -s, "
                      "sorted by SORT (time_ns, gflops, gbs, runs, name, ops, mem; default time_ns)")
  p = sub.add_parser("export", help="write the profile as Chrome trace-event JSON (opens in Perfetto)")
  p.add_argument("trace", nargs="?", help=TRACE_HELP)
  p.add_argument("-o", "--output", default="-", help="output file (default: stdout)")
  p = sub.add_parser("list", help="list the recorded runs, newest first")
  p = sub.add_parser("clean", help="delete recorded runs under the tinyplug cache (all, or all but the newest N)")
  p.add_argument("--keep", type=int, default=0, metavar="N", help="keep the newest N runs (default: 0)")

@hookimpl
def tinyplug_register_commands(register):
  register(CommandSpec(name="viz", help="open a VIZ trace: web UI (serve), text viewer (cli) or Chrome-trace export",
                       add_arguments=add_arguments, run="tinyplug_viz_web.commands:run"))
