"""Checks a loom dataset against reference ids, document by document.

Usage: compare_ids.py PREFIX REFERENCE.jsonl LABEL. REFERENCE has one JSON array of
ids per document; documents with no ids are the ones loom leaves out (Megatron-LM's
convention), so they must be absent from the dataset.
"""
import json
import struct
import sys

DTYPES = {4: "i", 8: "H"}


def read_dataset(prefix):
    with open(prefix + ".idx", "rb") as f:
        index = f.read()
    assert index[:9] == b"MMIDIDX\x00\x00", "not an MMIDIDX index"
    code = index[17]
    count = struct.unpack_from("<Q", index, 18)[0]
    lengths = struct.unpack_from(f"<{count}i", index, 34)
    offsets = struct.unpack_from(f"<{count}q", index, 34 + 4 * count)
    with open(prefix + ".bin", "rb") as f:
        data = f.read()
    kind = DTYPES[code]
    return [list(struct.unpack_from(f"<{n}{kind}", data, o)) for n, o in zip(lengths, offsets)]


def main():
    prefix, reference, label = sys.argv[1], sys.argv[2], sys.argv[3]
    with open(reference) as f:
        expected = [json.loads(line) for line in f if line.strip()]
    expected = [ids for ids in expected if ids]
    got = read_dataset(prefix)
    if len(got) != len(expected):
        sys.exit(f"{label}: {len(got)} sequences in the dataset, {len(expected)} non-empty reference documents")
    bad = 0
    for i, (g, e) in enumerate(zip(got, expected)):
        if g != e:
            bad += 1
            print(f"{label}: document {i} differs:\n  loom      {g}\n  reference {e}", file=sys.stderr)
    if bad:
        sys.exit(f"{label}: {bad} of {len(expected)} documents differ")
    print(f"{label}: {len(expected)} documents equal the reference ({sum(map(len, expected))} tokens)")


if __name__ == "__main__":
    main()
