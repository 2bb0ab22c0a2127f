"""What a relay brings from one agent waits in that channel's inbox: lines come out whole and in order, a
reader that falls behind pauses only its own channel, and the end is seen once the data is read."""

from __future__ import annotations

import io
import threading
import time

from launcher.transport import relay_frames as rf
from launcher.transport.relay_inbox import HIGH, LOW, Inbox


def test_lines_come_out_whole_in_order_and_cut_at_the_limit() -> None:
    inbox = Inbox(lambda: None, lambda: None)
    for piece in (b"ab", b"c\nde", b"f\n", b"x" * 10):
        inbox.feed(piece)
    assert inbox.readline() == b"abc\n"
    assert inbox.readline(100) == b"def\n"
    assert inbox.readline(4) == b"xxxx"
    inbox.end("the agent exited with code 0")
    assert inbox.readline() == b"x" * 6
    assert inbox.readline() == b""
    assert inbox.reason == "the agent exited with code 0"


def test_a_reader_waits_for_its_line() -> None:
    inbox = Inbox(lambda: None, lambda: None)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.extend(inbox))
    reader.start()
    for number in range(1000):
        inbox.feed(f"line {number}\n".encode())
    inbox.end(None)
    reader.join(10)
    assert got == [f"line {number}\n".encode() for number in range(1000)]


def test_a_reader_behind_pauses_its_channel_and_resumes_it_once_drained() -> None:
    said: list[str] = []
    inbox = Inbox(lambda: said.append("pause"), lambda: said.append("resume"))
    line = b"y" * 1023 + b"\n"
    while inbox._held() < HIGH:
        assert said == []
        inbox.feed(line)
    assert said == ["pause"]
    inbox.feed(line)  # what was on its way still comes in, and does not ask again
    assert said == ["pause"]
    while inbox._held() >= LOW:
        assert said == ["pause"]
        assert inbox.readline() == line
    assert said == ["pause", "resume"]


def test_frames_round_trip_and_a_cut_frame_is_an_end() -> None:
    stream = io.BytesIO()
    writer = rf.FrameWriter(stream)
    writer.send(rf.OUTPUT, 7, b"payload")
    writer.send(rf.ENDED, 2**32 - 1)
    whole = stream.getvalue()
    stream.seek(0)
    assert rf.read_frame(stream) == (rf.OUTPUT, 7, b"payload")
    assert rf.read_frame(stream) == (rf.ENDED, 2**32 - 1, b"")
    assert rf.read_frame(stream) is None
    assert rf.read_frame(io.BytesIO(whole[:12])) is None


def test_a_line_longer_than_the_pause_mark_is_read_whole() -> None:
    said: list[str] = []
    inbox = Inbox(lambda: said.append("pause"), lambda: said.append("resume"))
    inbox.feed(b"z" * (HIGH + 1))
    assert said == ["pause"]
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(inbox.readline(3 * HIGH)))
    reader.start()
    deadline = time.monotonic() + 10
    while said != ["pause", "resume"] and time.monotonic() < deadline:
        time.sleep(0.01)
    assert said == ["pause", "resume"], "the reader needs the rest of its line"
    inbox.feed(b"z" * HIGH)  # more of the same line: no pause while its reader waits for it
    inbox.feed(b"\n")
    reader.join(10)
    assert got == [b"z" * (2 * HIGH + 1) + b"\n"] and said == ["pause", "resume"]
