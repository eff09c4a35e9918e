# The scan kernel (scan.c); its twin and definition: scan.py.
SIMD: int  # 1 where the AVX2 loop runs on this CPU

def count_starts(data: bytes, prefix: bytes, literal: bytes) -> tuple[int, int]: ...

class Scanner:
    anchors: tuple[bytes, ...]
    def __init__(self, anchors: tuple[bytes, ...], line_starts: tuple[bytes, ...] = (), *,
                 offsets: tuple[int, ...], commonness: bytes, simd: bool = True) -> None: ...
    def scan(self, data: bytes | bytearray | memoryview) -> tuple[int, list[int], list[int]]: ...
