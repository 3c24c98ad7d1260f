# SPDX-License-Identifier: Apache-2.0
"""Differential tests: each scenario under dm-reverb 0.14 and under reverb_tf.

Both runs happen once per session, side by side in child processes
(`run_scenarios.py`); each scenario is then one test comparing what the
two observed (`harness.differences`). The dm-reverb 0.14 oracle is the venv
`scripts/setup_oracle.sh` builds (`$REVERB_TF_ORACLE_PYTHON` overrides it);
without it these tests fail, they do not skip.

Where reverb_tf differs on purpose, `DELIBERATE` names the scenario, what is
left out of the comparison and why.
"""

import collections
import concurrent.futures
import fnmatch
import json
import os
import subprocess
import sys
from typing import Any, Callable, Dict, List, Tuple

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import harness  # pylint: disable=g-import-not-at-top
import run_scenarios  # pylint: disable=g-import-not-at-top
import walk  # pylint: disable=g-import-not-at-top
import walk_differences  # pylint: disable=g-import-not-at-top

pytestmark = pytest.mark.side_venv(
    reason="dm-reverb 0.14 and TensorFlow 2.14 (scripts/setup_oracle.sh) exist for Python 3.11"
)

_TIMEOUT_S = 900
# The longest scenario takes about 15 s on 2 busy cores. dm-reverb hangs now
# and then (seen: tensor_address.graph_tensor_address, in TF's executor); the
# hung scenario is then retried alone, so the timeout is what a hang costs.
_SCENARIO_TIMEOUT_S = 30


def oracle_python() -> str:
    """The dm-reverb 0.14 venv's interpreter."""
    explicit = os.environ.get("REVERB_TF_ORACLE_PYTHON")
    if explicit:
        return explicit
    cache = os.environ.get("REVERB_TF_CACHE", os.path.expanduser("~/.cache/reverb_tf"))
    return os.path.join(cache, "dm-reverb-venv", "bin", "python")


def _scenario_ids():
    return [scenario_id for scenario_id, _, _ in run_scenarios.scenario_functions()]


# Scenario id -> (why we differ, a function applied to both observations
# before comparing, removing what differs on purpose).
def _sort_dict_items(observation: Any) -> Any:
    """The observation with every dict's items in key order."""
    if isinstance(observation, dict):
        out = {k: _sort_dict_items(v) for k, v in observation.items()}
        if "__dict__" in out and isinstance(out.get("items"), list):
            out["items"] = sorted(out["items"], key=lambda item: json.dumps(item[0]))
        return out
    if isinstance(observation, list):
        return [_sort_dict_items(v) for v in observation]
    return observation


def _without(*paths: str) -> Callable[[Any], Any]:
    """Drops the named top-level entries of a dict observation."""

    def strip(observation: Any) -> Any:
        items = [item for item in observation["items"] if item[0] not in paths]
        return dict(observation, items=items)

    return strip


DELIBERATE: Dict[str, Tuple[str, Callable[[Any], Any]]] = {
    "client.unpacked_signature_key_order": (
        "reverb_tf hands signatures back with every dict's keys sorted (tree.flatten's "
        "order); dm-reverb's order for nested dicts is whatever its protobuf map "
        "iteration gives, which is unspecified. Same keys and values.",
        _sort_dict_items,
    ),
    "structured.signature_and_trajectory_dataset": (
        "reverb_tf gives dicts decoded from a pattern's or a table's nested structure "
        "with sorted keys (tree.flatten's order); dm-reverb's order is its protobuf "
        "map iteration order, which is unspecified. Same keys and values.",
        _sort_dict_items,
    ),
    "structured.pattern_dataset_dict_specs": (
        "as structured.signature_and_trajectory_dataset: dict keys of a PatternDataset's "
        "element_spec, elements and unpack_pattern are sorted",
        _sort_dict_items,
    ),
    "client.mutate_priorities_and_delete": (
        "a NaN priority is rejected (InvalidArgumentError) on every path; dm-reverb "
        "rejects it on insert but accepts it in mutate_priorities, where it breaks a "
        "heap's order",
        _without("nan"),
    ),
    "module_surface.tables_and_limiters": (
        "Queue(0) and Prioritized(-1.0) raise ValueError at once; dm-reverb accepts "
        "them and the table then never serves (queue) or fails on first use",
        lambda o: _without("limiter_errors", "selector_errors")(o),
    ),
    "constructors.server_arguments": (
        "a second Server on a port in use raises UnavailableError; dm-reverb's gRPC "
        "sets SO_REUSEPORT, so its second server binds the same port and the kernel "
        "splits clients' connections between the two (tested in "
        "test_server_integration.py)",
        _without("port_in_use"),
    ),
    "constructors.table_arguments": (
        "Table(extensions=[...]) raises NotImplementedError: reverb_tf has no table "
        "extensions (dm-reverb fails with AttributeError on an object that is not one)",
        _without("extensions"),
    ),
    "constructors.rate_limiter_arguments": (
        "RateLimiter(min_diff > max_diff) raises ValueError at once; dm-reverb accepts it "
        "and the table can then never insert",
        _without("raw_inverted"),
    ),
    "module_surface.errors_module": (
        "DeadlineExceededError is also a TimeoutError (an extra base: code catching "
        "dm-reverb's classes still catches it)",
        _without("deadline_bases"),
    ),
}


def _run_all(python: str, module: str, out: str, ids) -> Dict[str, Any]:
    """Runs `ids` under `module`; a scenario that hangs or kills its process is
    recorded as such, and the rest run on in a fresh process. Scenarios that
    failed that way are retried once, alone, before they count.
    """
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONDONTWRITEBYTECODE="1")
    results: Dict[str, Any] = {}
    logs = []
    pending = list(ids)
    retried = set()
    while pending:
        # A neutral working directory: dm-reverb's package holds a `platform`
        # module that shadows the standard one when its directory is the cwd.
        process = subprocess.run(
            [
                python,
                os.path.join(HERE, "run_scenarios.py"),
                "--module",
                module,
                "--out",
                out,
                "--only",
                ",".join(pending),
                "--timeout_s",
                str(_SCENARIO_TIMEOUT_S),
            ],
            cwd="/",
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=_TIMEOUT_S,
            check=False,
        )
        # Each process's own log beside its observations: what a slow or
        # retried scenario leaves to look at.
        with open(out + ".log", "a") as log:
            log.write(process.stdout)
        with open(out) as f:
            for line in f:
                entry = json.loads(line)
                results[entry["id"]] = entry["observation"]
        pending = [i for i in pending if i not in results]
        if process.returncode == 0 or not pending:
            break
        logs.append(process.stdout[-4000:])
        broken = pending[0]
        if broken in retried:
            results[broken] = {
                "__scenario_failed__": f"{module}: the process died or hung "
                f"running it (exit {process.returncode}):\n{logs[-1]}"
            }
            pending = pending[1:]
        else:
            retried.add(broken)
            # Alone in a fresh process next: earlier scenarios may have left
            # state behind that this one tripped over.
            pending = [broken] + pending[1:]
    return results


@pytest.fixture(scope="session")
def observations(tmp_path_factory) -> Dict[str, Dict[str, Any]]:
    oracle = oracle_python()
    assert os.path.exists(oracle), (
        f"the dm-reverb 0.14 oracle venv is missing ({oracle}); run scripts/setup_oracle.sh"
    )
    tmp = tmp_path_factory.mktemp("differential")
    ids = _scenario_ids()
    # Two processes per module: the API walk, which spends most of its time
    # waiting out calls that block, beside the other scenarios.
    groups = {
        "walk": [i for i in ids if i.startswith("api_walk.")],
        "rest": [i for i in ids if not i.startswith("api_walk.")],
    }
    runs = {}
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        for group, group_ids in groups.items():
            runs["reverb", group] = pool.submit(
                _run_all, oracle, "reverb", str(tmp / f"reverb-{group}.jsonl"), group_ids
            )
            runs["reverb_tf", group] = pool.submit(
                _run_all,
                sys.executable,
                "reverb_tf",
                str(tmp / f"reverb_tf-{group}.jsonl"),
                group_ids,
            )
        out: Dict[str, Dict[str, Any]] = {"reverb": {}, "reverb_tf": {}}
        for (module, _), run in runs.items():
            out[module].update(run.result())
        return out


@pytest.mark.parametrize("scenario_id", _scenario_ids())
def test_same_observations(observations, scenario_id: str) -> None:
    want = observations["reverb"].get(scenario_id)
    got = observations["reverb_tf"].get(scenario_id)
    assert want is not None and got is not None, f"{scenario_id} did not run"
    assert not (isinstance(want, dict) and "__scenario_failed__" in want), (
        f"the scenario itself fails under dm-reverb:\n{want['__scenario_failed__']}"
    )
    if isinstance(got, dict) and "__scenario_failed__" in got:
        pytest.fail(f"fails under reverb_tf only:\n{got['__scenario_failed__']}")
    if scenario_id.startswith("api_walk."):
        _check_walk(scenario_id, want, got)
        return
    if scenario_id in DELIBERATE:
        _, strip = DELIBERATE[scenario_id]
        want, got = strip(want), strip(got)
    found = harness.differences(want, got, scenario_id)
    assert not found, "\n".join(found[:40])


def _walk_differences(scenario_id: str, want: Any, got: Any) -> Dict[str, List[str]]:
    """Label -> differences, for every walked call whose observations differ."""
    got_items = {json.dumps(k): v for k, v in got["items"]}
    out = {}
    for key, value in want["items"]:
        found = harness.differences(value, got_items.get(json.dumps(key), "<not made>"), key)
        if found:
            out[f"{scenario_id[len('api_walk.') :]}:{key}"] = found
    return out


def _check_walk(scenario_id: str, want: Any, got: Any) -> None:
    """Every differing call is DELIBERATE or PENDING; no entry is stale."""
    prefix = scenario_id[len("api_walk.") :] + ":"
    differing = _walk_differences(scenario_id, want, got)
    entries = [
        p
        for p, _ in walk_differences.DELIBERATE + walk_differences.PENDING
        if fnmatch.fnmatchcase(prefix, p.split(":")[0] + ":")
    ]
    unexpected = [
        f"{label}: {found[0]}"
        for label, found in differing.items()
        if not any(fnmatch.fnmatchcase(label, p) for p in entries)
    ]
    assert not unexpected, f"{len(unexpected)} walked calls differ from dm-reverb:\n" + "\n".join(
        unexpected[:40]
    )


def test_every_scenario_is_compared(observations) -> None:
    ids = set(_scenario_ids())
    assert len(ids) >= 1
    assert set(observations["reverb"]) == ids == set(observations["reverb_tf"])


def _api_walk_module():
    return run_scenarios._load(os.path.join(HERE, "scenarios", "api_walk.py"))  # pylint: disable=protected-access


# Members of walked classes that the walk leaves to TensorFlow: a dataset's
# members other than its constructors are tf.data.Dataset's own.
_DATASET_OWN = {"__init__", "from_table_signature"}

# Members of walked classes no program calls directly, and why.
_MEMBERS_NOT_WALKED = {
    "TrajectoryWriter.__init__": "takes the native writer; programs get writers from Client",
    "Writer.__init__": "as TrajectoryWriter.__init__",
    "StructuredWriter.__init__": "as TrajectoryWriter.__init__",
    "SampleInfo.key": "a namedtuple field, compared wherever samples are",
    "SampleInfo.priority": "as SampleInfo.key",
    "SampleInfo.probability": "as SampleInfo.key",
    "SampleInfo.table_size": "as SampleInfo.key",
    "SampleInfo.times_sampled": "as SampleInfo.key",
}


def test_api_walk_covers_the_api_list(observations) -> None:
    """Every public class and function of dm-reverb 0.14 is walked member by
    member, or named in NOT_WALKED with the reason."""
    api_walk = _api_walk_module()
    walked_names = {name for _, name in api_walk.WALKED}
    listed = {
        name
        for module, names in walk.api_members().items()
        if "pb2" not in module
        for name, d in names.items()
        if d.get("kind") in ("class", "function")
    }
    unaccounted = listed - walked_names - set(api_walk.NOT_WALKED)
    assert not unaccounted, f"neither walked nor in NOT_WALKED: {sorted(unaccounted)}"
    stale = (walked_names | set(api_walk.NOT_WALKED)) - listed
    assert not stale, f"not in dm-reverb 0.14's API list: {sorted(stale)}"
    missing = []
    for (module, name), scenario in api_walk.WALKED.items():
        observation = observations["reverb_tf"][f"api_walk.{scenario}"]
        labels = {item[0] for item in observation["items"] if isinstance(item[0], str)}
        called = {label.split("/")[1] for label in labels if label.count("/") == 2}
        members = set(walk.api_members()[module][name].get("members") or {}) or {"__call__"}
        if name in ("TrajectoryDataset", "TimestepDataset"):
            members &= _DATASET_OWN
        members = {
            m
            for m in members
            if not (
                m.startswith("__")
                and m not in ("__init__", "__iter__", "__enter__", "__exit__", "__call__")
            )
        }
        missing += [
            f"{name}.{m}"
            for m in sorted(members - called)
            if f"{name}.{m}" not in _MEMBERS_NOT_WALKED
        ]
    assert not missing, f"members of walked classes that no walk calls: {missing}"


def test_api_walk_counts(observations) -> None:
    """How many calls the walk compared, how many differ and why (print with -s)."""
    total = 0
    differing: Dict[str, List[str]] = {}
    for scenario_id, want in observations["reverb"].items():
        got = observations["reverb_tf"].get(scenario_id)
        if not scenario_id.startswith("api_walk.") or "items" not in want or "items" not in got:
            continue
        total += walk.count(want)
        differing.update(_walk_differences(scenario_id, want, got))
    deliberate = [
        label
        for label in differing
        if any(fnmatch.fnmatchcase(label, p) for p, _ in walk_differences.DELIBERATE)
    ]
    pending = collections.Counter(
        label.split(":")[0] for label in differing if label not in deliberate
    )
    print(
        f"API walk: {total} calls compared; {len(differing)} differ, {len(deliberate)} of "
        f"them deliberately, {len(differing) - len(deliberate)} pending: {dict(pending)}"
    )
    assert total >= 1000
    stale = [
        p
        for p, _ in walk_differences.DELIBERATE + walk_differences.PENDING
        if not any(fnmatch.fnmatchcase(label, p) for label in differing)
    ]
    assert not stale, f"entries of walk_differences.py that no call needs any more: {stale}"
