"""Read compute-sanitizer logs and fail on any kernel error or hazard.

    python3 scripts/sanitizer_summary.py memcheck.log racecheck.log synccheck.log

Driver probing noise is not a kernel error and is filtered explicitly: numba's initialisation asks
``cuGetProcAddress`` for entry points the driver may not have, which the sanitizer reports as an API
error (CUDA_ERROR_INVALID_VALUE / CUDA_ERROR_NOT_FOUND on that call). Everything else counts: invalid
global/shared/local accesses, misaligned accesses, races and hazards, leaks, kernel launch failures,
and other API errors. Prints one summary line per log and exits 1 if any counted.
"""

from __future__ import annotations

import re
import sys

# an API-error report names the call; these calls are the driver probing of numba's initialisation
_PROBING_CALLS = ("cuGetProcAddress",)
_RECORD = re.compile(r"^========= (?!ERROR SUMMARY|RACECHECK SUMMARY|    )(.+)$")
# memcheck and synccheck end with "ERROR SUMMARY: N errors", racecheck with "RACECHECK SUMMARY: N hazards displayed (E errors, W warnings)"
_SUMMARY = re.compile(r"========= (?:ERROR SUMMARY: (\d+) error|RACECHECK SUMMARY: \d+ hazards displayed \((\d+) error)")


def records(text: str) -> list[str]:
    """The first line of every report in a sanitizer log (continuation lines are indented)."""
    out = []
    for line in text.splitlines():
        m = _RECORD.match(line)
        if m and not m.group(1).startswith(("COMPUTE-SANITIZER", "Program hit", "Saved host backtrace",
                                            "Host Frame", "Target application returned")):
            out.append(m.group(1).strip())
        elif line.startswith("========= Program hit"):
            out.append(line[len("========= "):].strip())
    return out


def counted(record: str) -> bool:
    if record.startswith("Program hit") and any(call in record for call in _PROBING_CALLS):
        return False
    return True


def main(paths) -> int:
    bad = 0
    for path in paths:
        with open(path, errors="replace") as f:
            text = f.read()
        recs = records(text)
        kept = [r for r in recs if counted(r)]
        summary = ["".join(m) for m in _SUMMARY.findall(text)]
        finished = "sanitizer workload done" in text
        print(f"{path}: {len(kept)} kernel errors/hazards counted, {len(recs) - len(kept)} driver-probing reports "
              f"filtered, sanitizer summary {summary[-1] if summary else '?'} errors, workload "
              f"{'completed' if finished else 'DID NOT COMPLETE'}")
        for r in kept[:20]:
            print("   ", r)
        bad += len(kept) + (0 if finished else 1)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
