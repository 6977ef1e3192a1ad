"""What the .ci/check-*.sh scripts print: a line per check, under section titles, and a
summary line whose exit status says whether any check failed."""

import sys

counts = {"passed": 0, "failed": 0, "skipped": 0}


def section(title):
    print(f"\n== {title}")


def ok(msg):
    counts["passed"] += 1
    print(f"  ok    {msg}")


def fail(msg):
    counts["failed"] += 1
    print(f"  FAIL  {msg}")


def skip(msg):
    counts["skipped"] += 1
    print(f"  skip  {msg}")


def note(msg):
    print(f"        {msg}")


def check(cond, good, bad):
    """`good` when `cond` holds, else `bad`; says which."""
    if cond:
        ok(good)
    else:
        fail(bad)
    return bool(cond)


def finish(name, skips=True):
    """The summary line (`name: N passed, N failed[, N skipped]`), and exit 1 on a failure."""
    line = f"\n{name}: {counts['passed']} passed, {counts['failed']} failed"
    if skips:
        line += f", {counts['skipped']} skipped"
    print(line)
    sys.exit(1 if counts["failed"] else 0)
