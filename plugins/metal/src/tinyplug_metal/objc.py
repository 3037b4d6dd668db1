"""The Objective-C runtime and the Metal framework through ctypes: classes, selectors and typed message sends.

`objc_msgSend` has no fixed prototype: each call must go through a function pointer cast to the exact C signature
of the method (on arm64 a variadic call passes arguments differently). SIGNATURES is that table, one entry per
selector the runtime sends; a selector missing from it is an error naming it, never a guessed signature. No
message here returns a struct (those need `objc_msgSend_stret` on x86-64), so one entry point serves both Apple
silicon and Intel Macs. Importing this module loads nothing: the libraries load on first use, on macOS only."""
from __future__ import annotations
import ctypes, functools, platform, sys
from typing import Any

LIBOBJC = "/usr/lib/libobjc.A.dylib"
FOUNDATION = "/System/Library/Frameworks/Foundation.framework/Foundation"
METAL = "/System/Library/Frameworks/Metal.framework/Metal"

id_t = ctypes.c_void_p          # an object pointer (nil is None)
NSUInteger = ctypes.c_ulong     # 64-bit on every macOS Metal runs on
NSInteger = ctypes.c_long

class MTLSize(ctypes.Structure):
  """Metal's grid / threadgroup size, passed by value."""
  _fields_ = [("width", NSUInteger), ("height", NSUInteger), ("depth", NSUInteger)]

# selector -> (return type, argument types after self and _cmd)
SIGNATURES: dict[str, tuple[Any, tuple[Any, ...]]] = {
  # memory management and NSString / NSError
  "new": (id_t, ()), "retain": (id_t, ()), "release": (None, ()),
  "stringWithUTF8String:": (id_t, (ctypes.c_char_p,)), "UTF8String": (ctypes.c_char_p, ()),
  "localizedDescription": (id_t, ()),
  # MTLDevice
  "name": (id_t, ()), "newCommandQueue": (id_t, ()), "hasUnifiedMemory": (ctypes.c_bool, ()),
  "maxThreadgroupMemoryLength": (NSUInteger, ()),
  "newLibraryWithSource:options:error:": (id_t, (id_t, id_t, ctypes.POINTER(id_t))),
  "newComputePipelineStateWithFunction:error:": (id_t, (id_t, ctypes.POINTER(id_t))),
  "newBufferWithLength:options:": (id_t, (NSUInteger, NSUInteger)),
  # MTLCompileOptions
  "setFastMathEnabled:": (None, (ctypes.c_bool,)),
  # MTLLibrary, MTLComputePipelineState, MTLBuffer
  "newFunctionWithName:": (id_t, (id_t,)),
  "maxTotalThreadsPerThreadgroup": (NSUInteger, ()), "contents": (ctypes.c_void_p, ()),
  # MTLCommandQueue, MTLCommandBuffer, MTLComputeCommandEncoder
  "commandBuffer": (id_t, ()), "computeCommandEncoder": (id_t, ()),
  "setComputePipelineState:": (None, (id_t,)),
  "setBuffer:offset:atIndex:": (None, (id_t, NSUInteger, NSUInteger)),
  "setBytes:length:atIndex:": (None, (ctypes.c_void_p, NSUInteger, NSUInteger)),
  "dispatchThreadgroups:threadsPerThreadgroup:": (None, (MTLSize, MTLSize)),
  "endEncoding": (None, ()), "commit": (None, ()), "waitUntilCompleted": (None, ()),
  "status": (NSInteger, ()), "error": (id_t, ()),
  "GPUStartTime": (ctypes.c_double, ()), "GPUEndTime": (ctypes.c_double, ()),
}

# MTLCommandBufferStatus
STATUS_COMPLETED, STATUS_ERROR = 4, 5
STATUS_NAMES = {0: "not enqueued", 1: "enqueued", 2: "committed", 3: "scheduled", 4: "completed", 5: "error"}
# MTLResourceOptions: shared storage (CPU and GPU see the same memory on Apple silicon), default CPU caching
STORAGE_SHARED = 0 << 4

class MetalError(RuntimeError):
  """A Metal call failed; the message names the call and carries Metal's own description."""

class MetalUnavailable(MetalError):
  """Metal cannot be used here (not macOS, no Metal GPU)."""

def check_signatures() -> list[str]:
  """Problems in SIGNATURES (each selector's colons must match its argument count; no struct returns)."""
  problems = []
  for sel, (restype, argtypes) in SIGNATURES.items():
    if sel.count(":") != len(argtypes):
      problems.append(f"{sel}: {sel.count(':')} colon(s) but {len(argtypes)} argument type(s)")
    if isinstance(restype, type) and issubclass(restype, ctypes.Structure): problems.append(f"{sel}: returns a struct")
  return problems

@functools.cache
def _libraries() -> tuple[ctypes.CDLL, ctypes.CDLL]:
  """(libobjc, Metal), loaded once; MetalUnavailable off macOS or when they do not load."""
  if sys.platform != "darwin": raise MetalUnavailable(f"Metal needs macOS (this is {platform.system() or sys.platform})")
  try:
    objc = ctypes.CDLL(LIBOBJC)
    ctypes.CDLL(FOUNDATION)   # NSString, NSError
    metal = ctypes.CDLL(METAL)
  except OSError as e: raise MetalUnavailable(f"the Metal framework did not load: {e}") from e
  objc.objc_getClass.restype, objc.objc_getClass.argtypes = id_t, [ctypes.c_char_p]
  objc.sel_registerName.restype, objc.sel_registerName.argtypes = ctypes.c_void_p, [ctypes.c_char_p]
  objc.objc_autoreleasePoolPush.restype, objc.objc_autoreleasePoolPush.argtypes = ctypes.c_void_p, []
  objc.objc_autoreleasePoolPop.restype, objc.objc_autoreleasePoolPop.argtypes = None, [ctypes.c_void_p]
  metal.MTLCreateSystemDefaultDevice.restype, metal.MTLCreateSystemDefaultDevice.argtypes = id_t, []
  return objc, metal

def prototype(sel: str) -> Any:
  """The ctypes function type `objc_msgSend` is cast to for `sel`: (self, _cmd, *arguments) -> result."""
  if sel not in SIGNATURES: raise MetalError(f"no signature for the Objective-C selector {sel!r}: add it to SIGNATURES")
  restype, argtypes = SIGNATURES[sel]
  return ctypes.CFUNCTYPE(restype, id_t, ctypes.c_void_p, *argtypes)

@functools.cache
def _sender(sel: str) -> tuple[Any, int]:
  objc, _ = _libraries()
  fn = prototype(sel)(ctypes.cast(objc.objc_msgSend, ctypes.c_void_p).value)
  return fn, objc.sel_registerName(sel.encode())

def send(obj: Any, sel: str, *args: Any) -> Any:
  """`[obj sel...]` with the arguments converted to the selector's C types."""
  if not obj: raise MetalError(f"message {sel!r} sent to nil")
  fn, selector = _sender(sel)
  if len(args) != len(SIGNATURES[sel][1]):
    raise MetalError(f"{sel!r} takes {len(SIGNATURES[sel][1])} argument(s), got {len(args)}")
  return fn(obj, selector, *args)

def cls(name: str) -> int:
  """The Objective-C class `name`."""
  objc, _ = _libraries()
  if not (c := objc.objc_getClass(name.encode())): raise MetalError(f"the Objective-C class {name} does not exist here")
  return c

class autorelease_pool:
  """`with autorelease_pool():` frees the autoreleased objects made inside (command buffers, encoders, strings)."""
  def __enter__(self) -> None: self.token = _libraries()[0].objc_autoreleasePoolPush()
  def __exit__(self, *exc: Any) -> None: _libraries()[0].objc_autoreleasePoolPop(self.token)

def nsstring(text: str) -> int:
  """An autoreleased NSString (use inside an autorelease_pool)."""
  return send(cls("NSString"), "stringWithUTF8String:", text.encode())

def pystring(obj: Any) -> str:
  if not obj: return ""
  raw = send(obj, "UTF8String")
  return raw.decode(errors="replace") if raw else ""

def error_text(err: Any) -> str:
  """An NSError's localized description ('' for nil)."""
  return pystring(send(err, "localizedDescription")) if err else ""

def system_default_device() -> int:
  """MTLCreateSystemDefaultDevice(): the GPU (a +1 reference), or MetalUnavailable when there is none."""
  _, metal = _libraries()
  if not (dev := metal.MTLCreateSystemDefaultDevice()):
    raise MetalUnavailable("this Mac has no Metal GPU (MTLCreateSystemDefaultDevice returned nil)")
  return dev

MOCK_HINT = "DEV=MOCK+METAL runs the Metal renderer's kernels on the CPU emulator"

@functools.cache
def probe_metal() -> tuple[bool, str]:
  """(True, '') on a Mac with a Metal GPU, else (False, why and what to use instead)."""
  try:
    with autorelease_pool():
      dev = system_default_device()
      send(dev, "release")
  except MetalUnavailable as e: return False, f"{e}; {MOCK_HINT}"
  except (MetalError, OSError, AttributeError) as e: return False, f"Metal did not start: {e}; {MOCK_HINT}"
  return True, ""
