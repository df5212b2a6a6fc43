"""`checks.py compare-metrics`, under its old name (bench/gpu/check.sh calls it): two metrics.jsonl
files agree step by step within --rtol; see checks.py."""
import sys

from checks import main

if __name__ == "__main__":
    sys.exit(main(["compare-metrics", *sys.argv[1:]]))
