"""Run a snippet with pynvml and print one JSON line: result or NVML error.

Used by the kit's tests inside fake hosts: ``nvml_probe.py CODE`` where CODE
sets ``result`` (JSON-serialisable). Runs on Python 3.8+.
"""
import json
import sys

import pynvml

namespace = {"pynvml": pynvml, "result": None}
out = {}
try:
    exec(sys.argv[1], namespace)  # noqa: S102 - test helper
    out["result"] = namespace["result"]
except pynvml.NVMLError as exc:
    out["error"] = type(exc).__name__
    out["value"] = exc.value
    out["message"] = str(exc)
print(json.dumps(out))
