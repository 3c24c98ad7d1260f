# SPDX-License-Identifier: Apache-2.0
"""What TLS, tokens and the write-ahead log cost on inserts, and WAL recovery time.

Each configuration starts a `reverb_tf_server` binary on loopback and runs
one writer in this process for a few seconds, twice: the small-item workload
of the shared benchmark (bench/small_items.py: flush every 24 items) and
84x84x4 uint8 frames (random bytes, so nothing compresses). Configurations:
plaintext; TLS; TLS with a bearer token; the write-ahead log under each sync
policy (every_write, every_n_ms=10 ms, none). Then, with --recovery_items N,
N small items are written with the log (no checkpoint after the first), the
server is killed with SIGKILL and restarted: the time from the restart to
serving every item is the recovery time.

  .venv/bin/python bench/security_durability_bench.py [--seconds 4] [--recovery_items 1000000]

Prints one JSON object. Certificates come from the tests' PKI helper
(tests/integration.py, the `openssl` command).
"""

import argparse
import json
import pathlib
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "tests"))
import small_items  # pylint: disable=g-import-not-at-top,wrong-import-position
from server_process import start_server, table_config  # pylint: disable=g-import-not-at-top,wrong-import-position
from integration import TOKENS, make_test_pki  # pylint: disable=g-import-not-at-top,wrong-import-position


def _start(flags, max_size):
    return start_server("port: 0 " + table_config("t", max_size), *flags, stderr=subprocess.PIPE)


def _write_small(writer, seconds):
    start, n = time.monotonic(), 0
    while time.monotonic() - start < seconds:
        small_items.write_small_items(writer, "t", 240, start=n)
        n += 240
    return n / (time.monotonic() - start)


def _write_frames(writer, seconds):
    frames = np.random.default_rng(0).integers(0, 256, (16, 84, 84, 4), dtype=np.uint8)
    start, n = time.monotonic(), 0
    while time.monotonic() - start < seconds:
        for _ in range(24):
            writer.append({"frame": frames[n % 16]})
            writer.create_item("t", 1.0, {"frame": writer.history["frame"][-1]})
            n += 1
        writer.flush(block_until_num_items=24)
    writer.flush()
    return n / (time.monotonic() - start)


def run_config(name, flags, client_kwargs, seconds):
    import reverb_tf as reverb  # pylint: disable=g-import-not-at-top

    result = {}
    for workload, write in [("small", _write_small), ("large", _write_frames)]:
        # A log and checkpoints of their own per workload ({w} in a flag).
        process, port = _start(
            [f.format(w=workload) for f in flags], max_size=200_000 if workload == "small" else 2000
        )
        try:
            client = reverb.Client(f"localhost:{port}", **client_kwargs)
            with client.trajectory_writer(num_keep_alive_refs=1) as writer:
                write(writer, 0.5)  # warm up
                rate = write(writer, seconds)
            result[f"{workload}_items_per_s"] = rate
            if workload == "large":
                result["large_MB_per_s"] = rate * 84 * 84 * 4 / 1e6
        finally:
            process.kill()
            process.wait()
    print(name, json.dumps(result), file=sys.stderr)
    return result


def recovery(items, work):
    import reverb_tf as reverb  # pylint: disable=g-import-not-at-top

    flags = [
        f"--checkpoint_dir={work}/recovery-ck",
        f"--wal_dir={work}/recovery-wal",
        "--wal_sync=every_n_ms",
    ]
    process, port = _start(flags, max_size=items)
    client = reverb.Client(f"localhost:{port}")
    written = time.monotonic()
    with client.trajectory_writer(num_keep_alive_refs=1) as writer:
        small_items.write_small_items(writer, "t", items)
    written = time.monotonic() - written
    process.kill()
    process.wait()
    log_bytes = sum(p.stat().st_size for p in pathlib.Path(f"{work}/recovery-wal").iterdir())
    started = time.monotonic()
    process, port = _start(flags, max_size=items)  # returns at its readiness line
    serving = time.monotonic() - started
    try:
        size = reverb.Client(f"localhost:{port}").server_info(timeout=60)["t"].current_size
    finally:
        process.kill()
        process.wait()
    assert size == items, size
    return {
        "items": items,
        "write_s": written,
        "log_MB": log_bytes / 1e6,
        "restart_to_serving_s": serving,
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--recovery_items", type=int, default=0)
    args = parser.parse_args()
    from reverb_tf import security  # pylint: disable=g-import-not-at-top

    with tempfile.TemporaryDirectory() as work:
        pki = make_test_pki(pathlib.Path(work))
        tls_flags = [
            f"--tls_cert_file={pki / 'server.pem'}",
            f"--tls_key_file={pki / 'server.key'}",
        ]
        tls = security.ClientTls(str(pki / "ca.pem"))
        configs = {
            "plaintext": ([], {}),
            "tls": (tls_flags, {"tls": tls}),
            "tls_and_token": (
                tls_flags + [f"--auth_tokens_file={pki / 'tokens.txt'}"],
                {"tls": tls, "token": TOKENS["writer"]},
            ),
        }
        for policy in ["every_write", "every_n_ms", "none"]:
            configs[f"wal_{policy}"] = (
                [
                    f"--checkpoint_dir={work}/ck-{policy}-{{w}}",
                    f"--wal_dir={work}/wal-{policy}-{{w}}",
                    f"--wal_sync={policy}",
                ],
                {},
            )
        results = {
            name: run_config(name, flags, kwargs, args.seconds)
            for name, (flags, kwargs) in configs.items()
        }
        base = results["plaintext"]
        for name, result in results.items():
            for key in ["small_items_per_s", "large_MB_per_s"]:
                result[f"{key}_ratio_to_plaintext"] = result[key] / base[key]
        if args.recovery_items:
            results["recovery"] = recovery(args.recovery_items, work)
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
