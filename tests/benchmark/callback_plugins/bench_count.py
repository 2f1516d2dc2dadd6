# Copyright: gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Callback for tests/benchmark/fleet_bench.py: per-host module runs and per-task timings.

Not shipped with the collection. Writes JSON to $BENCH_COUNT_OUT when the play ends.
"""

from __future__ import annotations

import json
import os
import time

from ansible.plugins.callback import CallbackBase

DOCUMENTATION = """
name: bench_count
type: aggregate
short_description: per-host module invocations and task timings for the fleet benchmark
description:
  - Counts, per host, the task results that ran a module on the host (loop items counted one by one,
    skipped results and controller-only actions such as debug, set_fact, assert and meta not counted),
    and times every task per host (from the worker's start to its result) and overall.
requirements:
  - BENCH_COUNT_OUT names the JSON file to write.
"""

CONTROLLER_ONLY = {
    "debug", "set_fact", "assert", "fail", "meta", "include_tasks", "import_tasks", "include_role",
    "import_role", "include_vars", "add_host", "group_by", "pause", "set_stats", "validate_argument_spec",
}


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "bench_count"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self):
        super().__init__()
        self.hosts = {}
        self.tasks = []
        self._task = None
        self._started = {}

    def _host(self, name):
        return self.hosts.setdefault(name, {"modules": 0, "changed": 0, "failed": 0, "tasks": {}})

    def _begin(self, task, handler=False):
        self._task = {"name": task.get_name(), "action": task.action, "handler": handler,
                      "start": time.monotonic(), "end": None}
        self.tasks.append(self._task)

    def v2_playbook_on_task_start(self, task, is_conditional):
        self._begin(task)

    def v2_playbook_on_handler_task_start(self, task):
        self._begin(task, handler=True)

    def v2_runner_on_start(self, host, task):
        self._started[(host.get_name(), task._uuid)] = time.monotonic()

    def _record(self, result, failed=False):
        now = time.monotonic()
        name = result._host.get_name()
        task = result._task
        action = task.action.rsplit(".", 1)[-1]
        data = self._host(name)
        res = result._result
        if action not in CONTROLLER_ONLY:
            items = res.get("results") if isinstance(res.get("results"), list) else None
            if items is not None:
                data["modules"] += sum(1 for item in items if not item.get("skipped"))
            elif not res.get("skipped"):
                data["modules"] += 1
        if res.get("changed"):
            data["changed"] += 1
        if failed:
            data["failed"] += 1
        started = self._started.pop((name, task._uuid), None)
        if started is not None:
            key = task.get_name()
            data["tasks"][key] = round(data["tasks"].get(key, 0.0) + now - started, 4)
        if self._task is not None:
            self._task["end"] = now

    def v2_runner_on_ok(self, result):
        self._record(result)

    def v2_runner_on_failed(self, result, ignore_errors=False):
        self._record(result, failed=not ignore_errors)

    def v2_runner_on_unreachable(self, result):
        self._record(result, failed=True)

    def v2_runner_on_skipped(self, result):
        self._started.pop((result._host.get_name(), result._task._uuid), None)

    def v2_playbook_on_stats(self, stats):
        path = os.environ.get("BENCH_COUNT_OUT")
        if not path:
            return
        tasks = [{"name": t["name"], "action": t["action"], "handler": t["handler"],
                  "wall": round((t["end"] or t["start"]) - t["start"], 4)} for t in self.tasks]
        with open(path, "w") as handle:
            json.dump({"hosts": self.hosts, "tasks": tasks}, handle, indent=1)
