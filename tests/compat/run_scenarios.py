# SPDX-License-Identifier: Apache-2.0
"""Runs differential scenarios under one module; writes observations as JSON lines.

    python run_scenarios.py --module reverb_tf --out ours.jsonl [--only ID,ID...]

Run by `test_differential.py` under the project's venv (reverb_tf) and under
the dm-reverb 0.14 oracle venv (reverb). Each finished scenario appends one
line `{"id": ..., "observation": ...}` to `--out` at once, so a run that dies
keeps what it finished. A scenario running longer than `--timeout_s` ends
the process with every thread's stack on stderr (faulthandler); the driver
then records it as hung and goes on in a fresh process.
"""

import argparse
import faulthandler
import glob
import importlib.util
import json
import os
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import harness  # pylint: disable=g-import-not-at-top


def scenario_functions():
    """Yields (id, module path, function name) of every scenario, in order."""
    for path in sorted(glob.glob(os.path.join(HERE, "scenarios", "*.py"))):
        prefix = os.path.splitext(os.path.basename(path))[0]
        with open(path) as f:
            source = f.read()
        import ast  # pylint: disable=g-import-not-at-top

        for node in ast.parse(source).body:
            if isinstance(node, ast.FunctionDef) and node.name.startswith("scenario_"):
                yield f"{prefix}.{node.name[len('scenario_') :]}", path, node.name


def _load(path, cache={}):  # pylint: disable=dangerous-default-value
    if path not in cache:
        name = "scenarios_" + os.path.splitext(os.path.basename(path))[0]
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        cache[path] = module
    return cache[path]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--module", required=True, choices=["reverb", "reverb_tf"])
    parser.add_argument("--out", required=True)
    parser.add_argument("--only", default="", help="comma-separated scenario ids")
    parser.add_argument("--timeout_s", type=float, default=120.0)
    args = parser.parse_args()
    only = set(filter(None, args.only.split(",")))
    # TensorFlow first, as real programs import it (coexistence).
    import tensorflow  # noqa: F401  # pylint: disable=g-import-not-at-top,unused-import

    reverb = importlib.import_module(args.module)
    with open(args.out, "a") as out:
        for scenario_id, path, function in scenario_functions():
            if only and scenario_id not in only:
                continue
            print(f"start {scenario_id}", file=sys.stderr, flush=True)
            faulthandler.dump_traceback_later(args.timeout_s, exit=True)
            ctx = harness.Context(reverb)
            started = time.monotonic()
            try:
                observation = harness.normalize(getattr(_load(path), function)(ctx))
            except Exception:  # pylint: disable=broad-except
                observation = {"__scenario_failed__": traceback.format_exc()}
            finally:
                ctx.close()
            faulthandler.cancel_dump_traceback_later()
            out.write(json.dumps({"id": scenario_id, "observation": observation}) + "\n")
            out.flush()
            print(
                f"done {scenario_id} {time.monotonic() - started:.2f}s", file=sys.stderr, flush=True
            )
    # Not a normal interpreter exit: calls the API walk recorded as blocking
    # (on a stopped server, dm-reverb waits for it forever) still sit in
    # daemon threads, and tearing down the native libraries under them can
    # crash the process after every observation is safely written.
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
