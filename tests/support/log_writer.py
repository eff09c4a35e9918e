"""A training-like writer process for the follow tests.

Appends ``step=N loss=X seq=N`` lines, one write(2) per line, with O_APPEND (as Python's
logging does, and as copytruncate needs), round-robin over its files. SIGHUP makes it
reopen its files, as logrotate's ``postrotate`` asks a daemon to. Prints the number of
lines written per file when done.

    python log_writer.py --lines N --pause SECONDS FILE...
"""

from __future__ import annotations

import argparse
import os
import signal
import time


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--lines", type=int, required=True)
    parser.add_argument("--pause", type=float, default=0.001, help="seconds between rounds over the files")
    parser.add_argument("files", nargs="+")
    arguments = parser.parse_args()
    reopen = [False]
    signal.signal(signal.SIGHUP, lambda *_: reopen.__setitem__(0, True))
    flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND
    fds = [os.open(path, flags, 0o644) for path in arguments.files]
    for step in range(1, arguments.lines + 1):
        if reopen[0]:
            reopen[0] = False
            for fd in fds:
                os.close(fd)
            fds = [os.open(path, flags, 0o644) for path in arguments.files]
        for fd in fds:
            os.write(fd, f"step={step} loss={2.0 + (step % 7) * 0.01:.4f} seq={step}\n".encode())
        time.sleep(arguments.pause)
    print(arguments.lines, flush=True)


if __name__ == "__main__":
    main()
