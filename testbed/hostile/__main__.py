"""``python -m testbed.hostile [--area AREA] [--case NAME] [--jobs N] [--list]``: re-run the hostile cases, print a
Markdown table (area, case, expected, observed, message), the counts per class and per area, and the output of
every case that ended outside its expected class; exit 1 when any did."""

from __future__ import annotations

import argparse
import collections
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from testbed.hostile.runner import Result, run_case, s3_server_if, verdict
from testbed.hostile.table import AREAS, select

MESSAGE_CHARS = 140
OUTPUT_LINES = 40


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m testbed.hostile", description=__doc__)
    parser.add_argument("--area", action="append", choices=[a.replace("_", "-") for a in AREAS])
    parser.add_argument("--case", action="append", metavar="NAME", help="only cases whose id holds NAME")
    parser.add_argument("--jobs", type=int, default=2, choices=[1, 2], help="cases run at once (default 2)")
    parser.add_argument("--list", action="store_true", help="list the cases and exit")
    args = parser.parse_args(argv)
    chosen = select(args.area, args.case)
    if not chosen:
        parser.error("no case matches")
    if args.list:
        for case in chosen:
            print(f"{case.id}\t{case.expect}\t{case.surface}")
        return 0
    started = time.monotonic()
    with (
        tempfile.TemporaryDirectory(prefix="kftrain-hostile-") as root,
        s3_server_if(any("s3" in case.needs for case in chosen)),
        ThreadPoolExecutor(max_workers=args.jobs) as pool,
    ):
        results = list(pool.map(lambda case: _announced(run_case(case, Path(root))), chosen))
    print(report(results, time.monotonic() - started))
    return 0 if all(r.as_expected for r in results) else 1


def _announced(result: Result) -> Result:
    mark = "ok " if result.as_expected else "OFF"
    print(f"{mark} {result.case.id}: {verdict(result)} ({result.seconds:.1f} s)", file=sys.stderr, flush=True)
    return result


def _cell(text: str) -> str:
    text = " ".join(text.split())
    if len(text) > MESSAGE_CHARS:
        text = text[: MESSAGE_CHARS - 1] + "…"
    return text.replace("|", "\\|").replace("`", "'")


def report(results: list[Result], seconds: float) -> str:
    lines = ["| area | case | expected | observed | message |", "|---|---|---|---|---|"]
    for r in results:
        observed = r.observed if r.as_expected else f"**{r.observed}**"
        lines.append(f"| {r.case.area} | {r.case.name} | {r.case.expect} | {observed} | {_cell(r.message)} |")
    by_class = collections.Counter(r.observed for r in results)
    lines += ["", f"{len(results)} cases in {seconds:.0f} s wall; per observed class:", ""]
    lines += [f"- {klass}: {count}" for klass, count in by_class.most_common()]
    lines += ["", "| area | cases | as expected | off |", "|---|---|---|---|"]
    areas: dict[str, list[Result]] = collections.defaultdict(list)
    for r in results:
        areas[r.case.area].append(r)
    for area, rs in areas.items():
        good = sum(r.as_expected for r in rs)
        lines.append(f"| {area} | {len(rs)} | {good} | {len(rs) - good} |")
    off = [r for r in results if not r.as_expected]
    if off:
        lines += ["", f"## {len(off)} case(s) outside their expected class", ""]
    for r in off:
        tail = "\n".join(line[:300] for line in r.output.splitlines()[-OUTPUT_LINES:])
        lines += [f"### {r.case.id}: {verdict(r)}", "", f"surface: {r.case.surface}", "", "```", tail, "```", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
