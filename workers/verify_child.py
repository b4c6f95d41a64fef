"""Child-process entry of a verification: `python -m workers.verify_child` runs the heavy
checks of `workers.verify_checks` under an address-space cap.

It reads one JSON request on stdin ({"paths", "options", "memory_cap_bytes"}) and writes
one JSON report on stdout. The cap is set before numpy is imported, so every later
allocation of this process counts against it; a file that makes the runner allocate
without bound ends in a MemoryError (reported as `memory_exceeded`) or, failing that, in
this process dying, which the parent reports as `crashed`. The parent owns the
wall-clock limit: it kills this process when time is up.
"""

from __future__ import annotations

import json
import resource
import sys
from typing import Any


def _cap_memory(cap: int) -> None:
    if cap > 0:
        _soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        limit = cap if hard == resource.RLIM_INFINITY else min(cap, hard)
        resource.setrlimit(resource.RLIMIT_AS, (limit, hard))


def request_options(raw: dict[str, Any]) -> Any:
    from registry.gguf.limits import Limits
    from workers.verify_checks import CheckOptions

    raw = dict(raw)
    limits = Limits(**raw.pop("limits", {}))
    return CheckOptions(limits=limits, **raw)


def main() -> int:
    request = json.loads(sys.stdin.read())
    _cap_memory(int(request.get("memory_cap_bytes", 0)))
    from workers.verify_checks import check_files

    report = check_files(request["paths"], request_options(request.get("options", {})))
    sys.stdout.write(json.dumps(report.to_dict()))
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
