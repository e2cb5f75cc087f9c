#!/usr/bin/env python3
"""damage_loomx.py IN OUT WHERE: copies a .loomx, damaged at WHERE:
  data     one bit flipped in the middle of the largest run of parameter data
           (found as the byte range the checksum trailer records)
  tables   one bit flipped in the model name's bytes
  trailer  one bit flipped in the checksum trailer's section table
  strip    the checksum trailer removed (as an older Loom wrote it)"""
import struct
import sys

src, out, where = sys.argv[1], sys.argv[2], sys.argv[3]
b = bytearray(open(src, "rb").read())
assert b[-8:] == b"LOOMCRC1", "no checksum trailer"
payload = struct.unpack_from("<Q", b, len(b) - 16)[0]
count = struct.unpack_from("<I", b, len(b) - 24)[0]
sections, at = [], payload
for _ in range(count):
    offset, size, _crc, name_len = struct.unpack_from("<QQII", b, at)
    at += 24
    sections.append((offset, size, b[at:at + name_len].decode()))
    at += name_len
if where == "data":
    offset, size, _ = max(sections[1:], key=lambda s: s[1])
    b[offset + size // 2] ^= 0x10
elif where == "tables":
    name = b"model"
    pos = b.index(name)
    assert not any(o <= pos < o + s for o, s, _ in sections[1:])
    b[pos] ^= 0x01
elif where == "trailer":
    b[payload + 3] ^= 0x01
elif where == "strip":
    b = b[:payload]
open(out, "wb").write(bytes(b))
