"""The heuristic's decision for every kernel of the strided and mnist CNN training steps (first_step.py's models,
batch 64: loss and parameter gradients) and of conv_s2, conv_64, conv_28, conv_28s2 and convt with both input gradients: one line per
kernel, its loop and reduce sizes and opts. Run it under two trees and diff the outputs to see which kernels a
heuristic change touches:
  python benchmarks/conv_decisions.py > after.txt
  PYTHONPATH=<tree>:<tree>/plugins/cpu_llvm/src python benchmarks/conv_decisions.py > before.txt"""
from __future__ import annotations
import os, sys
sys.path.insert(0, os.path.dirname(__file__))
from first_step import _make_model
from tinyplug import nn
from tinyplug.codegen.kernel import Kernel
from tinyplug.device import Device
from tinyplug.passes.heuristic import heuristic_opts
from tinyplug.schedule import create_schedule
from tinyplug.tensor import Tensor

def show(tag: str, outs: list[Tensor]) -> None:
  items, _ = create_schedule([o.uop for o in outs])
  for ast in (it.ast for it in items if it.ast.op.name == "SINK"):
    k = Kernel(ast, Device["CPU"].renderer)
    print(tag, [r.src[0].arg for r in k.loop_axes], [r.src[0].arg for r in k.reduce_axes], heuristic_opts(k))

def main() -> None:
  Tensor.training = True
  for model in ("strided", "cnn"):
    m = _make_model(model, nn)
    x, y = Tensor.randint(64, 1, 28, 28, high=256).realize(), Tensor.randint(64, high=10).realize()
    params = nn.state.get_parameters(m)
    for p in params: p.requires_grad = True
    loss = m(x).sparse_categorical_crossentropy(y)
    show(model, [loss, *loss.gradient(*params)])
  convs = {"conv_s2": ((8, 64, 56, 56), (128, 64, 3, 3), dict(stride=2, padding=1), False),
           "conv_64": ((8, 64, 56, 56), (64, 64, 3, 3), dict(padding=1), False),
           "conv_28": ((8, 64, 28, 28), (64, 64, 3, 3), dict(padding=1), False),
           "conv_28s2": ((8, 64, 28, 28), (128, 64, 3, 3), dict(stride=2, padding=1), False),
           "convt": ((8, 64, 28, 28), (64, 32, 4, 4), dict(stride=2, padding=1), True)}
  for name, (xs, ws, kw, transposed) in convs.items():
    x, w = Tensor.empty(*xs, requires_grad=True), Tensor.empty(*ws, requires_grad=True)
    out = x.conv_transpose2d(w, **kw) if transposed else x.conv2d(w, **kw)
    show(name, [out, *out.square().sum().gradient(x, w)])

if __name__ == "__main__":
  main()
