"""What a test that fakes another machine (the CPU renderer's vector registers, caches, threads) must drop: graphs,
gradients and schedules are built by rules that read the machine, and none of their caches' keys holds it."""
from tinyplug import gradient_template, schedule
from tinyplug.tensor_ops import template

def forget_built_graphs() -> None:
  """Drop the graph, gradient and schedule templates, so the next graph is built for the machine now described."""
  schedule._templates.clear(); template._templates.clear(); template._seen.clear()
  gradient_template._templates.clear(); gradient_template._seen.clear()
