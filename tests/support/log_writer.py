"""A training-like writer process for the follow tests.

Appends ``step=N loss=X seq=N`` lines, one write(2) per line, with O_APPEND (as Python's
logging does, and as copytruncate needs), round-robin over its files, until SIGTERM. SIGHUP
makes it reopen its files, as logrotate's ``postrotate`` asks a daemon to. Prints the
number of lines written per file when stopped.

    python log_writer.py --pause SECONDS FILE...
"""

from __future__ import annotations

import argparse
import os
import signal
import time


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pause", type=float, default=0.001, help="seconds between rounds over the files")
    parser.add_argument("files", nargs="+")
    arguments = parser.parse_args()
    reopen, stop = [False], [False]
    signal.signal(signal.SIGHUP, lambda *_: reopen.__setitem__(0, True))
    signal.signal(signal.SIGTERM, lambda *_: stop.__setitem__(0, True))
    flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND
    fds = [os.open(path, flags, 0o644) for path in arguments.files]
    step = 0
    while not stop[0]:
        if reopen[0]:
            reopen[0] = False
            for fd in fds:
                os.close(fd)
            fds = [os.open(path, flags, 0o644) for path in arguments.files]
        step += 1
        for fd in fds:
            os.write(fd, f"step={step} loss={2.0 + (step % 7) * 0.01:.4f} seq={step}\n".encode())
        time.sleep(arguments.pause)
    print(step, flush=True)


if __name__ == "__main__":
    main()
