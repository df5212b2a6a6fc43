"""A TensorBoard event-file reader written from the format's description, independent of
loom's writer: TFRecord framing (u64 length, u32 masked CRC-32C of the length's 8 bytes, the
data, u32 masked CRC-32C of the data, little-endian) and the protobuf wire format of
tensorflow's Event (wall_time = 1 double, step = 2 int64, file_version = 3 string,
summary = 5 Summary { repeated Value value = 1 { string tag = 1; float simple_value = 2 } }).

    read_tfevents.py check METRICS_JSONL --steps N EVENT_FILE...

checks every record's CRCs, each file opening with file_version, the files' steps together
being 1..N in order, and the scalars equal to metrics.jsonl's numbers as float32. Every record
is also checked against Google's protobuf runtime given the fields of event.proto and
summary.proto that loom writes: the parse must agree with the decoder here, and
re-serialising it must give the record's bytes back (no stray field). TensorBoard's own
reader is tests/reference/tensorboard_reader.py.
"""
import argparse
import json
import math
import struct
import sys


def crc32c_table():
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
        table.append(crc)
    return table


TABLE = crc32c_table()


def crc32c(data):
    crc = 0xFFFFFFFF
    for byte in data:
        crc = TABLE[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def masked(crc):
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def records(raw):
    at = 0
    while at < len(raw):
        assert at + 12 <= len(raw), f"truncated record header at byte {at}"
        (length,) = struct.unpack_from("<Q", raw, at)
        (length_crc,) = struct.unpack_from("<I", raw, at + 8)
        assert length_crc == masked(crc32c(raw[at : at + 8])), f"length CRC wrong at byte {at}"
        data = raw[at + 12 : at + 12 + length]
        assert len(data) == length, f"truncated record data at byte {at}"
        (data_crc,) = struct.unpack_from("<I", raw, at + 12 + length)
        assert data_crc == masked(crc32c(data)), f"data CRC wrong at byte {at}"
        yield data
        at += 12 + length + 4


def varint(data, at):
    value, shift = 0, 0
    while True:
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, at
        shift += 7


def fields(data):
    """(field number, wire type, value) of a message: ints for varints, bytes otherwise."""
    at = 0
    while at < len(data):
        key, at = varint(data, at)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, at = varint(data, at)
        elif wire == 1:
            value, at = data[at : at + 8], at + 8
        elif wire == 5:
            value, at = data[at : at + 4], at + 4
        elif wire == 2:
            length, at = varint(data, at)
            value, at = data[at : at + length], at + length
        else:
            raise AssertionError(f"wire type {wire}")
        yield number, wire, value


def event(data):
    out = {"scalars": {}}
    for number, wire, value in fields(data):
        if number == 1:
            assert wire == 1
            (out["wall_time"],) = struct.unpack("<d", value)
        elif number == 2:
            assert wire == 0
            out["step"] = value - (1 << 64) if value >= 1 << 63 else value
        elif number == 3:
            assert wire == 2
            out["file_version"] = value.decode()
        elif number == 7:
            assert wire == 2
            status = {n: x for n, _, x in fields(value)}
            assert status == {1: 1}, f"SessionLog {status}: only status START is written"
            out["session_start"] = True
        elif number == 5:
            assert wire == 2
            for v_number, _, v in fields(value):
                assert v_number == 1, f"Summary field {v_number}"
                parts = {n: (w, x) for n, w, x in fields(v)}
                assert parts[2][0] == 5, "simple_value is not a float"
                out["scalars"][parts[1][1].decode()] = struct.unpack("<f", parts[2][1])[0]
        else:
            raise AssertionError(f"Event field {number}")
    return out


def protobuf_event_class():
    """tensorflow.Event with the fields loom writes, built from a descriptor (no generated code)."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    F = descriptor_pb2.FieldDescriptorProto
    file = descriptor_pb2.FileDescriptorProto(name="loom_tfevents_subset.proto", package="tensorflow",
                                              syntax="proto2")
    summary = file.message_type.add(name="Summary")
    value = summary.nested_type.add(name="Value")
    value.field.add(name="tag", number=1, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    value.field.add(name="simple_value", number=2, type=F.TYPE_FLOAT, label=F.LABEL_OPTIONAL)
    summary.field.add(name="value", number=1, type=F.TYPE_MESSAGE, type_name=".tensorflow.Summary.Value",
                      label=F.LABEL_REPEATED)
    event = file.message_type.add(name="Event")
    event.field.add(name="wall_time", number=1, type=F.TYPE_DOUBLE, label=F.LABEL_OPTIONAL)
    event.field.add(name="step", number=2, type=F.TYPE_INT64, label=F.LABEL_OPTIONAL)
    event.field.add(name="file_version", number=3, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    event.field.add(name="summary", number=5, type=F.TYPE_MESSAGE, type_name=".tensorflow.Summary",
                    label=F.LABEL_OPTIONAL)
    session_log = file.message_type.add(name="SessionLog")
    session_log.field.add(name="status", number=1, type=F.TYPE_INT32, label=F.LABEL_OPTIONAL)  # START = 1
    event.field.add(name="session_log", number=7, type=F.TYPE_MESSAGE, type_name=".tensorflow.SessionLog",
                    label=F.LABEL_OPTIONAL)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    descriptor = pool.FindMessageTypeByName("tensorflow.Event")
    if hasattr(message_factory, "GetMessageClass"):
        return message_factory.GetMessageClass(descriptor)
    return message_factory.MessageFactory(pool).GetPrototype(descriptor)


def outside_check(data_records, mine, Event):
    """The same records through protobuf's runtime."""
    for data, decoded in zip(data_records, mine):
        parsed = Event()
        parsed.ParseFromString(data)
        assert parsed.SerializeToString() == data, "protobuf's re-serialisation differs: a stray or misencoded field"
        assert parsed.wall_time == decoded["wall_time"]
        assert parsed.HasField("step") == ("step" in decoded) and parsed.step == decoded.get("step", 0)
        assert parsed.file_version == decoded.get("file_version", "")
        assert {v.tag: v.simple_value for v in parsed.summary.value} == decoded["scalars"], "scalars differ"
        assert parsed.HasField("session_log") == decoded.get("session_start", False)


def as_float32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def check(args):
    try:
        Event = protobuf_event_class()
    except ImportError as error:
        raise AssertionError(f"protobuf is needed (scripts/setup.sh --tests): {error}")
    events = []
    for path in args.events:
        raw = open(path, "rb").read()
        data_records = list(records(raw))
        in_file = [event(r) for r in data_records]
        outside_check(data_records, in_file, Event)
        assert in_file and in_file[0].get("file_version") == "brain.Event:2", f"{path}: first Event {in_file[:1]}"
        assert not in_file[0]["scalars"] and "step" not in in_file[0]
        for e in in_file[1:]:
            if e.get("session_start"):
                # A resumed run's restart: TensorBoard drops what came before from this step on.
                assert not e["scalars"] and e is in_file[1], f"{path}: a SessionLog START not right after file_version"
                events = [kept for kept in events if kept["step"] < e["step"]]
                continue
            events.append(e)
    metrics = [json.loads(line) for line in open(args.metrics)]
    steps = [e["step"] for e in events]
    assert steps == list(range(1, args.steps + 1)), f"steps {steps}"
    for e in events:
        assert math.isfinite(e["wall_time"]) and e["wall_time"] > 1.5e9, f"wall_time {e['wall_time']}"
    assert all(a["wall_time"] <= b["wall_time"] for a, b in zip(events, events[1:])), "wall_time goes back"
    by_step = {m["step"]: m for m in metrics}
    assert sorted(by_step) == steps, f"metrics.jsonl has steps {sorted(by_step)}"
    for e in events:
        m = by_step[e["step"]]
        s = e["scalars"]
        assert s["train/loss"] == as_float32(m["loss"]), f"step {e['step']}: {s['train/loss']} vs {m['loss']}"
        assert s["train/lr"] == as_float32(m["lr"]), f"step {e['step']}: lr {s['train/lr']} vs {m['lr']}"
        assert s["train/grad_norm"] == as_float32(m["grad_norm"])
        assert s["perf/tokens_per_s"] == as_float32(m["tokens_per_s"])
        assert s["perf/step_ms"] == as_float32(m["step_ms"])
    # memory is in the first record of each run: the steps after are those without it.
    for e in events:
        memory = by_step[e["step"]].get("memory")
        tags = [k for k in e["scalars"] if k.startswith("memory/")]
        if memory is None:
            assert not tags, f"step {e['step']}: memory scalars {tags} without a memory record"
            continue
        params = max(r["params_bytes"] for r in memory)
        assert e["scalars"]["memory/params_mib"] == as_float32(params / 2**20), f"memory {e['scalars']}"
    first = events[0]["scalars"]
    print(f"{len(args.events)} file(s), {len(events)} steps, every CRC good (here and by the crc32c package), every "
          f"Event as protobuf's runtime reads it; train/loss {first['train/loss']:.6f} "
          f"... {events[-1]['scalars']['train/loss']:.6f}; step 1's tags {sorted(first)}")


def main():
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command", required=True)
    c = sub.add_parser("check")
    c.add_argument("metrics")
    c.add_argument("--steps", type=int, required=True)
    c.add_argument("events", nargs="+")
    args = parser.parse_args()
    try:
        check(args)
    except (AssertionError, KeyError, IndexError, struct.error) as error:
        print(f"FAIL: {type(error).__name__}: {error}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
