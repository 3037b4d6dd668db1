"""Every kernel these tests render passes the MSL check (clang's C++ for OpenCL with the metal_stdlib stand-in), and
the check rejects what Apple's compiler rejects for address spaces: it is not a check that cannot fail."""
from __future__ import annotations
import re
import pytest
from tinyplug import dtypes
from tinyplug.codegen.kernel import Opt, OptOps
from tinyplug_metal.check import MSLCheckError, as_clcpp

def test_every_rendered_kernel_passes_the_check(render, kernel_table, msl_check):
  failed, count = [], 0
  for name, build, opts in kernel_table:
    for spec in render(build(), opts=opts):
      count += 1
      try: msl_check(spec.src, f"{name}.metal")
      except MSLCheckError as e: failed.append(str(e)[:1500])
  assert count >= len(kernel_table) and not failed, "\n\n".join(failed[:3])

def _reduction(render, tensor) -> str:
  (spec,) = render(tensor(8, 256).sum(axis=1), opts=[Opt(OptOps.GROUPTOP, 0, 64)])
  return spec.src

def test_a_device_pointer_cast_without_its_address_space_is_rejected(render, tensor, msl_check):
  (spec,) = render(tensor(64) * 2, opts=[Opt(OptOps.UPCAST, 0, 4)])
  msl_check(spec.src)
  bad = spec.src.replace("(device float4*)", "(float4*)")   # a `thread` pointer to device memory, as Metal reads it
  assert bad != spec.src
  with pytest.raises(MSLCheckError, match="converts between mismatching address spaces"): msl_check(bad)

def test_threadgroup_memory_as_a_device_pointer_is_rejected(render, tensor, msl_check):
  src = _reduction(render, tensor)
  msl_check(src)
  name = re.search(r"threadgroup float (\w+)\[", src).group(1)
  bad = src.replace("threadgroup_barrier(mem_flags::mem_threadgroup);",
                    f"device float* tp_wrong = {name}; threadgroup_barrier(mem_flags::mem_threadgroup);", 1)
  with pytest.raises(MSLCheckError, match=r"'__global float \*__private' with an lvalue of type '__local float\[64\]'"):
    msl_check(bad)

def test_a_buffer_without_an_address_space_is_rejected(render, tensor, msl_check):
  (spec,) = render(tensor(16) + 1)
  bad = spec.src.replace("device float* data1", "float* data1")
  with pytest.raises(MSLCheckError, match="address space"): msl_check(bad)

def test_syntax_and_type_mistakes_are_rejected(render, tensor, msl_check):
  (spec,) = render(tensor(16).bitcast(dtypes.int32) + 1)
  msl_check(spec.src)
  assert "as_type<int>(" in spec.src
  with pytest.raises(MSLCheckError, match="as_type: sizes differ"): msl_check(spec.src.replace("as_type<int>", "as_type<short>"))
  with pytest.raises(MSLCheckError, match="undeclared identifier 'data9'"): msl_check(spec.src.replace("(data1+", "(data9+"))

def test_vector_constructors_become_vector_literals_only():
  assert as_clcpp("float4 v = float4(a, b, c, d); x = my_float4(y); half2(p, q)") == \
    "float4 v = (float4)(a, b, c, d); x = my_float4(y); (half2)(p, q)"
