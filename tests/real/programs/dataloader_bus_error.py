"""A DataLoader worker that dies of SIGBUS (as one does when /dev/shm is too small), for the fixture
tests/fixtures/real/dataloader_bus_error.log: ``python dataloader_bus_error.py > log 2>&1``."""

import os
import signal

import torch


class Data(torch.utils.data.Dataset):
    def __len__(self):
        return 64

    def __getitem__(self, i):
        if i == 40:
            os.kill(os.getpid(), signal.SIGBUS)
        return torch.zeros(4)


for step, _batch in enumerate(torch.utils.data.DataLoader(Data(), batch_size=4, num_workers=2), 1):
    print(f"step={step} loss={1.0 / step!r}", flush=True)
