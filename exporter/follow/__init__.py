"""Files to lines: discovery, watching, tailing."""

from exporter.follow.discover import LogFileRole, classify, is_followed, run_label
from exporter.follow.follower import FollowedFile, Follower, Sink
from exporter.follow.identity import FilePosition, Fingerprint
from exporter.follow.tailer import ReadBatch, Tailer

__all__ = [
    "FilePosition",
    "FollowedFile",
    "Fingerprint",
    "Follower",
    "LogFileRole",
    "ReadBatch",
    "Sink",
    "Tailer",
    "classify",
    "is_followed",
    "run_label",
]
