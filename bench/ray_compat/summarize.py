"""Summarizes a harness run: per file ``passed/public``, the total, and the failures.

    python summarize.py WORK_DIR FILES_TXT
    python summarize.py --mark-hung RESULTS/STEM MESSAGE   (used by run.sh)

Reads, per test file (``results/<stem>.*``): ``public.txt`` and ``excluded.tsv`` (the
filter's verdicts), the junit xml of each pytest run of the file, and ``outcomes.tsv``
(the plugin's own record, for tests a killed run has no junit entry for). Writes into
WORK_DIR: ``results.txt``, ``excluded.tsv`` (test id, token, where) and ``failures.tsv``
(test id, outcome, cause: the first line of the error).

A public test *ran* when it passed, failed or errored; skipped and xfailed tests did not
run, and count in no total.
"""

from __future__ import annotations

import collections
import glob
import os
import re
import sys
import xml.etree.ElementTree as ET

RAN = ("passed", "failed", "error", "xpassed")


def _first_line(text: str | None) -> str:
    for line in (text or "").splitlines():
        line = line.strip()
        if line:
            return " ".join(line.split())[:300]
    return ""


def _read_lines(path: str) -> list[str]:
    if not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as f:
        return [line.rstrip("\n") for line in f if line.strip()]


def junit_outcomes(path: str, ray_path: str) -> dict[str, tuple[str, str]]:
    """test id -> (outcome, cause) from one junit xml file."""
    out = {}
    try:
        root = ET.parse(path).getroot()
    except (ET.ParseError, OSError):
        return out
    for case in root.iter("testcase"):
        classname = case.get("classname", "")
        parts = classname.split(".")[1:] if classname else []
        test_id = "::".join([ray_path, *parts, case.get("name", "")])
        outcome, cause = "passed", ""
        for child in case:
            if child.tag == "failure":
                outcome, cause = "failed", _first_line(child.get("message") or child.text)
            elif child.tag == "error":
                outcome, cause = "error", _first_line(child.get("message") or child.text)
                break
            elif child.tag == "skipped":
                if child.get("type") == "pytest.xfail":
                    outcome = "xfailed"
                else:
                    outcome = "skipped"
                cause = _first_line(child.get("message"))
        if not case.get("name"):
            continue
        previous = out.get(test_id)
        if previous and previous[0] in ("failed", "error") and outcome == "error":
            continue  # a teardown error after a failure: keep the failure
        out[test_id] = (outcome, cause)
    return out


def file_outcomes(results: str, stem: str, ray_path: str) -> dict[str, tuple[str, str]]:
    recorded = {}
    for line in _read_lines(os.path.join(results, f"{stem}.outcomes.tsv")):
        test_id, outcome, cause = (line.split("\t") + ["", ""])[:3]
        recorded[test_id] = (outcome, cause)
    from_junit = {}
    for xml in sorted(glob.glob(os.path.join(results, f"{stem}.*.xml"))):
        from_junit.update(junit_outcomes(xml, ray_path))
    merged = dict(recorded)
    for test_id, (outcome, cause) in from_junit.items():
        if recorded.get(test_id, ("", ""))[1].startswith("killed"):
            continue  # the test the file timeout killed: keep saying so
        # The plugin's cause is junit's message, with the missing Ray names the test uses in front.
        merged[test_id] = (outcome, recorded.get(test_id, ("", ""))[1] or cause)
    return merged


def collection_error(results: str, stem: str) -> str:
    """The error that stopped pytest from collecting the file, if any."""
    for log in sorted(glob.glob(os.path.join(results, f"{stem}.*.log"))):
        with open(log, encoding="utf-8", errors="replace") as f:
            text = f.read()
        if "ERROR collecting" in text or "errors during collection" in text.lower():
            errors = [line[2:].strip() for line in text.splitlines() if line.startswith("E ")]
            return errors[-1] if errors else "collection error"
    return ""


def mark_hung(prefix: str, message: str) -> None:
    """Records the test a killed pytest was running as failed with ``message``."""
    started = _read_lines(prefix + ".progress.tsv")
    done = {line.split("\t", 1)[0] for line in _read_lines(prefix + ".outcomes.tsv")}
    hung = [t for t in started if t not in done]
    if hung:
        with open(prefix + ".outcomes.tsv", "a", encoding="utf-8") as f:
            f.write(f"{hung[-1]}\tfailed\t{message}\n")


def summarize(work: str, files_txt: str) -> None:  # noqa: C901 - report formatting: one branch per table and column
    results = os.path.join(work, "results")
    ray_files = []
    with open(files_txt, encoding="utf-8") as f:
        for line in f:
            line = line.split("#", 1)[0].strip()
            if line and not line.startswith("+"):
                ray_files.append(line)
    rows, failures, excluded = [], [], []
    not_run = []
    totals = collections.Counter()
    for ray_path in ray_files:
        sub = os.path.dirname(ray_path).removeprefix("python/ray/").replace("/", "_")
        stem = f"{sub}__{os.path.basename(ray_path)[:-3]}"
        if not glob.glob(os.path.join(results, f"{stem}.*")):
            continue  # not selected in this run
        public = _read_lines(os.path.join(results, f"{stem}.public.txt"))
        for line in _read_lines(os.path.join(results, f"{stem}.excluded.tsv")):
            excluded.append(line.split("\t"))
        n_excluded = len(_read_lines(os.path.join(results, f"{stem}.excluded.tsv")))
        outcomes = file_outcomes(results, stem, ray_path)
        counts = collections.Counter()
        for test_id in public:
            outcome, cause = outcomes.get(test_id, ("not run", "no result: pytest stopped before this test"))
            counts[outcome] += 1
            if outcome in ("failed", "error", "not run"):
                failures.append((test_id, outcome, cause))
            elif outcome in ("skipped", "xfailed"):
                not_run.append((test_id, outcome, cause))
        ran = sum(counts[o] for o in RAN) + counts["not run"]
        passed = counts["passed"] + counts["xpassed"]
        note = collection_error(results, stem) if not public else ""
        rows.append((ray_path, passed, ran, len(public), counts, n_excluded, note))
        totals.update(counts)
        totals["public"] += len(public)
        totals["excluded"] += n_excluded
    total_ran = sum(totals[o] for o in RAN) + totals["not run"]
    total_passed = totals["passed"] + totals["xpassed"]

    lines = []
    for name in ("ray_commit", "oxray_commit"):
        value = _read_lines(os.path.join(results, name))
        if value:
            lines.append(f"{name.replace('_', ' ')}: {value[0]}")
    lines.append("")
    lines.append(f"{'file':<52} {'passed/public':>13}  failed error skipped  excluded")
    for ray_path, passed, _ran, n_public, counts, n_excluded, note in rows:
        lines.append(
            f"{ray_path:<52} {f'{passed}/{n_public}':>13}  {counts['failed'] + counts['not run']:>6} "
            f"{counts['error']:>5} {counts['skipped'] + counts['xfailed']:>8}  {n_excluded:>8}"
            + (f"   COLLECTION ERROR: {note}" if note else "")
        )
    pct = 100.0 * total_passed / total_ran if total_ran else 0.0
    lines.append("")
    lines.append(
        f"public-API tests: {totals['public']} (excluded: {totals['excluded']}; "
        f"skipped or xfailed: {totals['skipped'] + totals['xfailed']})"
    )
    lines.append(f"public-API tests run: {total_ran}; passed {total_passed} = {pct:.1f}%")
    if failures:
        lines.append("")
        lines.append("failures by cause (count, cause; failures.tsv lists each test):")
        by_cause = collections.Counter(_cause_key(cause) for _, _, cause in failures)
        for cause, count in by_cause.most_common():
            lines.append(f"  {count:>3}  {cause}")
    text = "\n".join(lines) + "\n"
    with open(os.path.join(work, "results.txt"), "w", encoding="utf-8") as f:
        f.write(text)
    with open(os.path.join(work, "failures.tsv"), "w", encoding="utf-8") as f:
        f.write("test_id\toutcome\tcause\n")
        for row in failures:
            f.write("\t".join(row) + "\n")
    with open(os.path.join(work, "excluded.tsv"), "w", encoding="utf-8") as f:
        f.write("test_id\ttoken\twhere\n")
        for row in excluded:
            f.write("\t".join(row) + "\n")
    with open(os.path.join(work, "skipped.tsv"), "w", encoding="utf-8") as f:
        f.write("test_id\toutcome\treason\n")
        for row in not_run:
            f.write("\t".join(row) + "\n")
    print(text, end="")


def _cause_key(cause: str) -> str:
    """A cause with its ids, addresses and numbers blanked, to group alike failures."""
    cause = re.sub(r"0x[0-9a-f]+|\b[0-9a-f]{16,}\b", "<id>", cause)
    cause = re.sub(r"\d+(\.\d+)?", "N", cause)
    return cause[:160]


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--mark-hung":
        mark_hung(sys.argv[2], sys.argv[3])
    elif len(sys.argv) == 3:
        summarize(sys.argv[1], sys.argv[2])
    else:
        sys.exit(__doc__)
