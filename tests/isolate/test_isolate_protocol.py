"""What crosses the process boundary, and how: arrays through shared memory, never through pickle."""

from __future__ import annotations

import socket

import numpy as np
import pytest

import opaque_ops as oo
from opaque_ops.isolate import protocol as P
from tests.helpers.misbehaving_kernels import one_op, twice

pytestmark = pytest.mark.usefixtures("no_leaks")


def test_messages_carry_arrays_by_reference_into_shared_memory():
    a, b = socket.socketpair()
    try:
        ids = iter(range(1, 100))
        sender = P.Channel(a, copy_in=True, ids=ids)
        receiver = P.Channel(b, copy_in=True, ids=ids)
        big = np.arange(1 << 18, dtype=np.float32)  # 1 MiB with a recognisable pattern
        payload = {"x": big, "y": [big[::2], np.int8(3)], "model": bytes(200_000)}
        packed, fds = sender.outbox.pack(payload)
        pickled, ref = packed
        assert len(pickled) < 2000, len(pickled)  # the arrays are not in the pickle
        assert big[1000:1016].tobytes() not in pickled
        assert len(fds) == 1 and ref[0] == sender.outbox.segment.id
        sender.outbox.segment.close_fd()
        sender.outbox.segment = None
        sender.send(payload)
        got = receiver.recv()
        np.testing.assert_array_equal(got["x"], big)
        np.testing.assert_array_equal(got["y"][0], big[::2])
        assert got["y"][1] == 3 and got["model"] == bytes(200_000)
    finally:
        a.close()
        b.close()


def test_object_arrays_are_refused():
    a, b = socket.socketpair()
    try:
        ch = P.Channel(a, copy_in=True, ids=iter(range(1, 10)))
        with pytest.raises(TypeError, match="cannot cross"):
            ch.send({"s": np.array(["a", None], dtype=object)})
    finally:
        a.close()
        b.close()


def test_worker_side_views_are_read_only():
    a, b = socket.socketpair()
    try:
        ids = iter(range(1, 10))
        P.Channel(a, copy_in=True, ids=ids).send(np.ones(8, np.float32))
        got = P.Channel(b, copy_in=False, ids=ids).recv()
        assert not got.flags.writeable
    finally:
        a.close()
        b.close()


def test_set_invoke_get_send_no_message(bad_ops, monkeypatch):
    """The per-inference calls never touch the socket: only the shared page's semaphores."""
    it = oo.Interpreter(model_content=one_op("Twice"), custom_ops=[bad_ops], isolate=True)
    it.allocate_tensors()
    out = it.get_output_details()[0]["index"]
    channel = it._proc.channel
    sent = []
    monkeypatch.setattr(channel, "transmit", lambda *a, **k: sent.append(a) or P.Channel.transmit(channel, *a, **k))
    monkeypatch.setattr(channel, "recv", lambda *a, **k: sent.append(a) or P.Channel.recv(channel, *a, **k))
    x = np.arange(4, dtype=np.float32)
    for i in range(200):
        it.set_tensor(0, x + i)
        it.invoke()
        np.testing.assert_array_equal(it.get_tensor(out), twice(x + i))
    assert sent == []
    # Anything else does use messages (so the check above can see them).
    it.get_input_details()
    assert len(sent) == 2
    it.close()


def test_crash_record_layout_matches_the_c_helper():
    """c/src/isolate_helper.c writes the record the parent unpacks with CRASH_RECORD."""
    from opaque_ops.build import paths as _paths

    src = (_paths.c_dir() / "src" / "isolate_helper.c").read_text()
    body = src[src.index("typedef struct {") : src.index("} oo_crash_record;")]
    fields = [line.split()[0] for line in body.splitlines()[1:] if line.strip() and not line.strip().startswith("/*")]
    assert fields == ["int32_t"] * 6 + ["uint64_t", "char"]
    assert P.CRASH_RECORD.format == "<iiiiiiQ64s" and "char op[64]" in body
    assert f"{P.CRASH_MAGIC:#x}" in src.lower()


def test_arrays_of_bytes_and_str_cross_element_by_element():
    """A string tensor's value (and get_tensor's object array of bytes); before: refused as any object array."""
    a, b = socket.socketpair()
    try:
        ids = iter(range(1, 10))
        sender, receiver = P.Channel(a, copy_in=True, ids=ids), P.Channel(b, copy_in=True, ids=ids)
        big = bytes(range(256)) * 300  # past BYTES_INLINE: through the shared segment, not the pickle
        value = np.array([[b"a\x00", "\u00e9"], [big, b""]], dtype=object)
        (pickled, _), fds = sender.outbox.pack(value)
        assert big[:4096] not in pickled and len(fds) == 1
        sender.outbox.segment.close_fd()  # (the packed message is dropped, not sent)
        sender.outbox.segment = None
        sender.send(value)
        got = receiver.recv()
        assert got.dtype == object and got.shape == (2, 2)
        assert [type(x) for x in got.ravel()] == [bytes, str, bytes, bytes]
        assert got.ravel().tolist() == value.ravel().tolist()
    finally:
        a.close()
        b.close()
