#!/usr/bin/env python3
"""Reads a TensorBoard events file with TensorBoard's own reader, independently of the C++ writer.

Usage: read_tfevents.py EVENTS_FILE

First checks the TFRecord framing of every record itself (uint64 LE length, masked CRC-32C of the
length, data, masked CRC-32C of the data; its own pure-Python CRC-32C), so that a bad record is
named exactly. Then reads the file with the tensorboard package's event file loader (the reader
TensorBoard itself runs, with its own framing and CRC checks, decoding into its own Event
protos), which must read every record, and prints one JSON line per event:
  {"wall_time": W, "step": S, "file_version": V}
  {"wall_time": W, "step": S, "tag": T, "value": X}     one line per Summary value
A bad CRC, a truncated record, an undecodable Event or a record TensorBoard does not read: a
message naming the record (0-based) and what is wrong on stderr, exit status 1. Usage errors:
exit status 2. Run it with the project environment's Python (tensorboard is in requirements.txt).
"""
import json
import struct
import sys

from tensorboard.backend.event_processing import event_file_loader


def _crc32c_table():
    table = []
    for b in range(256):
        r = b
        for _ in range(8):
            r = (r >> 1) ^ 0x82F63B78 if r & 1 else r >> 1
        table.append(r)
    return table


_TABLE = _crc32c_table()


def crc32c(data):
    r = 0xFFFFFFFF
    for byte in data:
        r = _TABLE[(r ^ byte) & 0xFF] ^ (r >> 8)
    return r ^ 0xFFFFFFFF


def masked_crc32c(data):
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


class BadRecord(Exception):
    pass


def records(data):
    """Yields (index, event bytes) for each record; raises BadRecord naming the first bad one."""
    pos, index = 0, 0
    while pos < len(data):
        if len(data) - pos < 12:
            raise BadRecord("record %d: truncated header: %d of 12 bytes at offset %d"
                            % (index, len(data) - pos, pos))
        header = data[pos:pos + 8]
        (length,) = struct.unpack("<Q", header)
        (length_crc,) = struct.unpack("<I", data[pos + 8:pos + 12])
        if length_crc != masked_crc32c(header):
            raise BadRecord("record %d: bad length CRC at offset %d: stored 0x%08x, computed 0x%08x"
                            % (index, pos, length_crc, masked_crc32c(header)))
        start = pos + 12
        if len(data) - start < length + 4:
            raise BadRecord("record %d: truncated: %d bytes of data and CRC, %d expected"
                            % (index, len(data) - start, length + 4))
        body = data[start:start + length]
        (data_crc,) = struct.unpack("<I", data[start + length:start + length + 4])
        if data_crc != masked_crc32c(body):
            raise BadRecord("record %d: bad data CRC at offset %d: stored 0x%08x, computed 0x%08x"
                            % (index, start, data_crc, masked_crc32c(body)))
        yield index, body
        pos = start + length + 4
        index += 1


def lines(path, data):
    framed = sum(1 for _ in records(data))  # raises BadRecord naming the first bad record
    read = 0
    for event in event_file_loader.LegacyEventFileLoader(path).Load():
        head = {"wall_time": event.wall_time, "step": event.step}
        what = event.WhichOneof("what")
        if what == "file_version":
            yield dict(head, file_version=event.file_version)
        elif what == "summary":
            for value in event.summary.value:
                yield dict(head, tag=value.tag, value=value.simple_value)
        else:
            yield head
        read += 1
    if read != framed:
        raise BadRecord("record %d: TensorBoard's reader read %d of the %d records"
                        % (read, read, framed))


def main(argv):
    if len(argv) != 2:
        print("usage: read_tfevents.py EVENTS_FILE", file=sys.stderr)
        return 2
    with open(argv[1], "rb") as f:
        data = f.read()
    try:
        for line in lines(argv[1], data):
            print(json.dumps(line))
    except BadRecord as e:
        sys.stdout.flush()
        print("%s: %s" % (argv[1], e), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
