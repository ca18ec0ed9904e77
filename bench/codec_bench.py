"""``make bench-codec``: encode/decode records per second, fastavro vs the reference avro library,
on the same records and the same wire format (Avro single-object encoding).

Writes bench/results/codec.json and codec.png. Both libraries run in this one process, one after
the other, over identical inputs, so the ratio is meaningful on a noisy shared machine even when
the absolute rates drift.
"""

from __future__ import annotations

import argparse
import io
import json
import platform
import sys
import time
from pathlib import Path

import avro
import avro.io
import avro.schema
import fastavro
from rich.console import Console
from rich.table import Table

from ballast.avro.codec import HEADER_LEN, AvroCodec, _strip_logical_types
from ballast.workload import input_events

RESULTS = Path(__file__).resolve().parent / "results"
console = Console()


def _best_rate(fn, n: int, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return n / best


def run(n: int, repeats: int) -> dict:
    records = list(input_events(n, num_keys=10_000, z=1.0, seed=5, payload_bytes=100))
    codec = AvroCodec("io.ballast.InputEvent")
    header = codec.schema.header
    encoded = [codec.encode(r) for r in records]

    ref_schema = avro.schema.parse(json.dumps(_strip_logical_types(codec.schema.source)))
    ref_writer = avro.io.DatumWriter(ref_schema)
    ref_reader = avro.io.DatumReader(ref_schema)

    def fastavro_encode():
        for r in records:
            codec.encode(r)

    def fastavro_decode():
        for b in encoded:
            codec.decode(b)

    def avro_encode():
        for r in records:
            buf = io.BytesIO()
            buf.write(header)
            ref_writer.write(r, avro.io.BinaryEncoder(buf))
            buf.getvalue()

    def avro_decode():
        for b in encoded:
            ref_reader.read(avro.io.BinaryDecoder(io.BytesIO(b[HEADER_LEN:])))

    # same bytes from both writers: the comparison is like for like
    buf = io.BytesIO()
    buf.write(header)
    ref_writer.write(records[0], avro.io.BinaryEncoder(buf))
    assert buf.getvalue() == encoded[0], "avro and fastavro disagree on the encoding"

    results = {}
    for lib, enc, dec, reps in (
        ("fastavro", fastavro_encode, fastavro_decode, repeats),
        ("avro", avro_encode, avro_decode, max(1, repeats // 2)),
    ):
        console.print(f"\\[bench-codec] {lib}: encoding and decoding {n:,} records x{reps} …")
        results[lib] = {"encode_per_s": _best_rate(enc, n, reps), "decode_per_s": _best_rate(dec, n, reps)}
    return {
        "records": n,
        "repeats": repeats,
        "record": "io.ballast.InputEvent, 100-byte payload, Zipf keys",
        "wire_format": "Avro single-object encoding (C3 01 + CRC-64-AVRO fingerprint + binary body)",
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "versions": {"fastavro": fastavro.__version__, "avro": avro.__version__},
        "results": results,
        "ratio_fastavro_over_avro": {
            op: results["fastavro"][f"{op}_per_s"] / results["avro"][f"{op}_per_s"]
            for op in ("encode", "decode")
        },
    }


def plot(summary: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    libs = list(summary["results"])
    fig, ax = plt.subplots(figsize=(6, 3.5))
    width = 0.38
    for i, op in enumerate(("encode", "decode")):
        vals = [summary["results"][lib][f"{op}_per_s"] for lib in libs]
        ax.bar([x + i * width for x in range(len(libs))], vals, width, label=op)
    ax.set_xticks([x + width / 2 for x in range(len(libs))], libs)
    ax.set_ylabel("records / s")
    ax.set_title(f"Avro codec, {summary['records']:,} InputEvents (higher is better)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--records", type=int, default=50_000)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--out", type=Path, default=RESULTS / "codec.json")
    args = p.parse_args(argv)
    summary = run(args.records, args.repeats)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(summary, indent=2) + "\n")
    plot(summary, args.out.with_suffix(".png"))
    table = Table(title="Avro codec throughput (records/s)")
    for col in ("library", "encode", "decode"):
        table.add_column(col, justify="right")
    for lib, r in summary["results"].items():
        table.add_row(lib, f"{r['encode_per_s']:,.0f}", f"{r['decode_per_s']:,.0f}")
    console.print(table)
    ratio = summary["ratio_fastavro_over_avro"]
    console.print(
        f"fastavro / avro: encode {ratio['encode']:.1f}x, decode {ratio['decode']:.1f}x → {args.out}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
