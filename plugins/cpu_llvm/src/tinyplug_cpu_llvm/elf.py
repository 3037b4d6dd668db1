"""The symbols a compiled ELF object needs from outside itself, read from its symbol table, so a kernel calling a
function no loaded library defines is an error before it runs, not a jump to address 0."""
from __future__ import annotations
import struct

SHT_SYMTAB, SHN_UNDEF = 2, 0

def undefined_symbols(obj: bytes) -> list[str]:
  """Names of the undefined symbols of a 64-bit little-endian ELF object; [] for anything else (another object
  format is left to the loader)."""
  if len(obj) < 64 or obj[:4] != b"\x7fELF" or obj[4] != 2 or obj[5] != 1: return []
  shoff, = struct.unpack_from("<Q", obj, 0x28)
  shentsize, shnum = struct.unpack_from("<HH", obj, 0x3A)
  if shentsize < 64 or shoff + shnum * shentsize > len(obj): return []
  sections = [struct.unpack_from("<IIQQQQIIQQ", obj, shoff + i * shentsize) for i in range(shnum)]
  names: list[str] = []
  for _name, kind, _flags, _addr, offset, size, link, _info, _align, entsize in sections:
    if kind != SHT_SYMTAB or entsize < 24 or link >= shnum or offset + size > len(obj): continue
    str_off, str_size = sections[link][4], sections[link][5]
    strings = obj[str_off:str_off + str_size]
    for at in range(offset + entsize, offset + size - entsize + 1, entsize):   # entry 0 is the null symbol
      st_name, _info, _other, shndx = struct.unpack_from("<IBBH", obj, at)
      if shndx == SHN_UNDEF and st_name and (end := strings.find(b"\0", st_name)) > st_name:
        names.append(strings[st_name:end].decode("latin-1"))
  return names
