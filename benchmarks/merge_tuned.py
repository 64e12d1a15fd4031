"""Merges a sweep's winners (benchmarks/results/<family>-h200-tuned.json, written by
bench_gemm.py --sweep) into the CUDA path's tuned table (autotune_configs/sm90/<family>.json): an
entry replaces the table's entry of the same key where the sweep's time beats the time of the
call it was compared with (the table's or the cost model's pick, timed in the same run) by more
than --margin; other sweep entries are dropped. Prints what it changed.

    python benchmarks/merge_tuned.py --family fp8_gemm [--margin 0.02] [--note TEXT]
"""
import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from dg_triton import tuned_files  # noqa: E402

KEY_FIELDS = ("kind", "m", "n", "k", "out_bytes", "b_k_major", "num_sms")


def key(entry: dict) -> tuple:
    return tuple(entry.get(name) for name in KEY_FIELDS)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--family", required=True, choices=["bf16_gemm", "fp8_gemm"])
    parser.add_argument("--margin", type=float, default=0.02)
    parser.add_argument("--note", default="")
    args = parser.parse_args()
    table_path = ROOT / "autotune_configs" / "sm90" / f"{args.family}.json"
    sweep = tuned_files.read_document(ROOT / "benchmarks" / "results" / f"{args.family}-h200-tuned.json", "cuda")
    table = tuned_files.read_document(table_path, "cuda")
    if sweep is None or table is None:
        print("merge_tuned: a file is missing; nothing merged")
        return 1
    entries = {key(entry): entry for entry in table["entries"]}
    for entry in sweep["entries"]:
        old = entries.get(key(entry))
        if entry["time_us"] < entry["heuristic_us"] * (1 - args.margin):
            if args.note:
                entry["note"] = args.note
            entries[key(entry)] = entry
            print(f"  {key(entry)}: {old and old['config']} -> {entry['config']} "
                  f"({entry['heuristic_us']} -> {entry['time_us']} us)")
        else:
            print(f"  {key(entry)}: kept {old and old['config']} (sweep best {entry['time_us']} us "
                  f"against {entry['heuristic_us']})")
    table["entries"] = sorted(entries.values(), key=lambda e: (-e["m"], e["n"], e["k"], e.get("kind", "")))
    tuned_files.write_document(table_path, table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
