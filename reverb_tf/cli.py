# SPDX-License-Identifier: Apache-2.0
"""The `reverb_tf` command: run, look at and load-test replay servers.

    reverb_tf serve --config_file=server.textproto [server flags]
    reverb_tf info localhost:8000 [--json]
    reverb_tf checkpoint localhost:8000
    reverb_tf inspect /data/replay/2026-12-01T10:00:00.000000 [--json]
    reverb_tf bench localhost:8000 --table replay [--seconds 10]

Exit status: 0 on success, 1 when the server or the checkpoint fails the
command (the message says why), 2 for a usage error.
"""

import argparse
import json
import sys
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, TextIO

import numpy as np
import tree

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2


class _Failure(Exception):
    """A command failed for a reason the user should read (exit status 1)."""


def _table_dict(info: Any) -> Dict[str, Any]:
    """A table's info as plain JSON-ready values."""
    from reverb_tf import item_selectors  # pylint: disable=g-import-not-at-top

    limiter = info.rate_limiter_info
    return {
        "name": info.name,
        "current_size": info.current_size,
        "max_size": info.max_size,
        "max_times_sampled": info.max_times_sampled,
        "sampler": item_selectors.describe(info.sampler_options),
        "remover": item_selectors.describe(info.remover_options),
        "rate_limiter": {
            "samples_per_insert": limiter.samples_per_insert,
            "min_size_to_sample": limiter.min_size_to_sample,
            "min_diff": limiter.min_diff,
            "max_diff": limiter.max_diff,
            "inserts": limiter.inserts,
            "samples": limiter.samples,
            "deletes": limiter.deletes,
            "inserts_waiting": limiter.insert_stats.pending,
            "samples_waiting": limiter.sample_stats.pending,
        },
        "num_episodes": info.num_episodes,
        "num_unique_samples": info.num_unique_samples,
        "signature": None if info.signature is None else str(info.signature),
    }


def _print_tables(tables: List[Dict[str, Any]], out: TextIO) -> None:
    """Prints tables as aligned columns, one row per table."""
    header = [
        "table",
        "size",
        "max_size",
        "sampler",
        "remover",
        "rate limiter",
        "inserts",
        "samples",
        "signature",
    ]
    rows = [
        [
            t["name"],
            f"{t['current_size']:,}",
            f"{t['max_size']:,}",
            t["sampler"],
            t["remover"],
            (
                f"spi={t['rate_limiter']['samples_per_insert']:g} "
                f"min_size={t['rate_limiter']['min_size_to_sample']}"
            ),
            f"{t['rate_limiter']['inserts']:,}",
            f"{t['rate_limiter']['samples']:,}",
            "yes" if t["signature"] else "-",
        ]
        for t in tables
    ]
    widths = [max(len(str(r[i])) for r in [header] + rows) for i in range(len(header))]
    for row in [header] + rows:
        print("  ".join(str(v).ljust(w) for v, w in zip(row, widths)).rstrip(), file=out)


def _client(flags: argparse.Namespace) -> Any:
    """A client of flags.address with the TLS and token flags (else the environment's)."""
    import reverb_tf  # pylint: disable=g-import-not-at-top
    from reverb_tf import security  # pylint: disable=g-import-not-at-top

    tls = None
    if flags.tls_ca_file:
        tls = security.ClientTls(
            flags.tls_ca_file, flags.tls_cert_file, flags.tls_key_file, flags.tls_server_name
        )
    token = None
    if flags.token_file:
        with open(flags.token_file) as f:
            token = f.read().strip()
    try:
        return reverb_tf.Client(flags.address, tls=tls, token=token)
    except (ValueError, reverb_tf.errors.ReverbError) as e:
        raise _Failure(str(e)) from None


def _server_info(flags: argparse.Namespace) -> Dict[str, Any]:
    import reverb_tf  # pylint: disable=g-import-not-at-top

    address, timeout = flags.address, flags.timeout
    try:
        return _client(flags).server_info(timeout=timeout)
    except (reverb_tf.errors.DeadlineExceededError, reverb_tf.errors.UnavailableError) as e:
        raise _Failure(
            f"cannot reach a reverb_tf server at {address} within {timeout:g} s: {e}"
        ) from None


def _spill_line(address: str, spill: Dict[str, Any]) -> str:
    """One shard's disk tier in a line."""
    reads = spill["ram_reads"] + spill["disk_reads"]
    hits = f"{100 * spill['ram_reads'] / reads:.0f}% from RAM" if reads else "no reads yet"
    latency = (
        f", {1e6 * spill['disk_read_seconds'] / spill['disk_reads']:.0f} us per disk read"
        if spill["disk_reads"]
        else ""
    )
    compacted = (
        f"; compacted {spill['compactions']} segments, "
        f"{spill['compacted_bytes'] / 2**20:,.1f} MiB moved"
        if spill["compactions"]
        else ""
    )
    failing = f"; FAILING: {spill['last_error']}" if spill["last_error"] else ""
    if spill["compaction_error"]:
        failing += f"; compaction FAILING: {spill['compaction_error']}"
    return (
        f"spill {address}: {spill['dir']}: {spill['disk_bytes'] / 2**20:,.1f} MiB on disk "
        f"({spill['disk_file_bytes'] / 2**20:,.1f} MiB of files), "
        f"{spill['ram_bytes'] / 2**20:,.1f} MiB in RAM; reads {hits}{latency}{compacted}{failing}"
    )


def cmd_info(flags: argparse.Namespace, out: TextIO) -> None:
    tables = [_table_dict(info) for _, info in sorted(_server_info(flags).items())]
    spills = {
        address: spill
        for address, spill in _client(flags).spill_stats(timeout=flags.timeout).items()
        if isinstance(spill, dict)
    }
    if flags.json:
        json.dump({"address": flags.address, "tables": tables, "spill": spills}, out, indent=2)
        print(file=out)
    else:
        _print_tables(tables, out)
        for address, spill in sorted(spills.items()):
            print(_spill_line(address, spill), file=out)


def cmd_checkpoint(flags: argparse.Namespace, out: TextIO) -> None:
    import reverb_tf  # pylint: disable=g-import-not-at-top

    _server_info(flags)  # a clear error if nobody answers
    try:
        path = _client(flags).checkpoint()
    except reverb_tf.errors.ReverbError as e:
        raise _Failure(f"checkpoint failed: {e}") from None
    print(path, file=out)


def _progress_bar(stream: TextIO) -> Optional[Callable[[int, int], None]]:
    """A progress callback drawing a bar on `stream`, if it is a terminal."""
    if not stream.isatty():
        return None

    def report(done: int, total: int) -> None:
        fraction = done / total if total else 1.0
        bar = "#" * int(fraction * 40)
        stream.write(f"\rverifying [{bar:<40}] {fraction:6.1%} of {total / 2**20:,.1f} MiB")
        if done >= total:
            stream.write("\n")
        stream.flush()

    return report


def cmd_inspect(flags: argparse.Namespace, out: TextIO) -> None:
    from reverb_tf import _native  # pylint: disable=g-import-not-at-top
    from reverb_tf import client as client_lib  # pylint: disable=g-import-not-at-top
    from reverb_tf import errors  # pylint: disable=g-import-not-at-top

    started = time.monotonic()
    try:
        summary = _native.core().inspect_checkpoint(flags.checkpoint, _progress_bar(sys.stderr))
    except errors.ReverbError as e:
        raise _Failure(f"{type(e).__name__}: {e}") from None
    elapsed = time.monotonic() - started
    tables = [_table_dict(client_lib.table_info(info, None)) for info in summary["tables"]]
    for table, info in zip(tables, summary["tables"]):
        # The flat signature (the nested one needs TensorFlow to decode).
        table["signature"] = (
            None
            if info.signature is None
            else [
                f"{name}: {np.dtype(dtype).name}{list(shape)}"
                for name, dtype, shape in info.signature
            ]
        )
    result = {
        "path": summary["path"],
        "written_by": summary["written_by"],
        "file_bytes": summary["file_bytes"],
        "num_chunks": summary["num_chunks"],
        "num_items": sum(t["current_size"] for t in tables),
        "checksums": "verified",
        "tables": tables,
    }
    if flags.json:
        json.dump(result, out, indent=2)
        print(file=out)
        return
    print(f"checkpoint {result['path']}", file=out)
    print(
        f"  written by {result['written_by']}; {result['file_bytes']:,} bytes, "
        f"{result['num_chunks']:,} chunks, {result['num_items']:,} items; every record's "
        f"checksum verified in {elapsed:.1f} s",
        file=out,
    )
    _print_tables(tables, out)


def _bench_step(info: Any) -> Dict[str, Any]:
    """A small step that fits `info`'s signature (a float32[4] if it has none)."""
    if info.signature is None:
        return {"observation": np.zeros(4, np.float32)}
    from reverb_tf import signatures  # pylint: disable=g-import-not-at-top

    return tree.map_structure(
        lambda spec: np.zeros(
            [d if d is not None else 1 for d in signatures.spec_shape(spec)],
            signatures.spec_dtype(spec),
        ),
        info.signature,
    )


def cmd_bench(flags: argparse.Namespace, out: TextIO) -> None:
    import reverb_tf  # pylint: disable=g-import-not-at-top

    tables = _server_info(flags)
    if flags.table not in tables:
        raise _Failure(
            f"the server has no table '{flags.table}' (it has: {', '.join(sorted(tables))})"
        )
    info = tables[flags.table]
    step = _bench_step(info)
    client = _client(flags)
    items = 0
    started = time.monotonic()
    try:
        with client.trajectory_writer(num_keep_alive_refs=1) as writer:
            while time.monotonic() - started < flags.seconds:
                for _ in range(100):
                    writer.append(step)
                    # One squeezed step per item: the item is shaped like the step.
                    trajectory = tree.map_structure(lambda column: column[-1], writer.history)
                    writer.create_item(flags.table, 1.0, trajectory)
                    items += 1
                writer.flush(block_until_num_items=200, timeout_ms=int(flags.timeout * 1000))
            writer.flush(timeout_ms=int(flags.timeout * 1000))
        insert_s = time.monotonic() - started
        sampled = 0
        started = time.monotonic()
        dataset = client.sample(
            flags.table,
            num_samples=min(items, 10_000),
            emit_timesteps=False,
            rate_limiter_timeout_ms=1000,
        )
        try:
            for _ in dataset:
                sampled += 1
        except reverb_tf.errors.DeadlineExceededError:
            pass  # the table's rate limiter allows no more samples now
        sample_s = time.monotonic() - started
    except reverb_tf.errors.ReverbError as e:
        raise _Failure(f"bench failed: {type(e).__name__}: {e}") from None
    result = {
        "table": flags.table,
        "inserted": items,
        "insert_items_per_s": items / insert_s,
        "sampled": sampled,
        "sample_items_per_s": sampled / sample_s if sample_s else 0.0,
    }
    if flags.json:
        json.dump(result, out, indent=2)
        print(file=out)
    else:
        print(
            f"inserted {items:,} items in {insert_s:.1f} s: "
            f"{result['insert_items_per_s']:,.0f} items/s",
            file=out,
        )
        print(
            f"sampled {sampled:,} items in {sample_s:.1f} s: "
            f"{result['sample_items_per_s']:,.0f} items/s",
            file=out,
        )


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="reverb_tf",
        description=__doc__.split("\n\n")[0],
        epilog="Each command has its own --help. Exit status: 0 success, 1 the command "
        "failed (see the message), 2 usage error.",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    serve = commands.add_parser(
        "serve",
        help="run the reverb_tf_server binary",
        description="Runs the reverb_tf_server binary with the given flags (it replaces this "
        "process). `reverb_tf serve --help` lists the binary's flags.",
        add_help=False,
    )
    serve.add_argument("server_flags", nargs=argparse.REMAINDER)

    def with_address(name: str, help_text: str, description: str) -> argparse.ArgumentParser:
        command = commands.add_parser(name, help=help_text, description=description)
        command.add_argument("address", help="the server, host:port (e.g. localhost:8000)")
        command.add_argument(
            "--timeout",
            type=float,
            default=10.0,
            help="seconds to wait for the server (default: 10)",
        )
        command.add_argument(
            "--tls_ca_file",
            help="connect with TLS, verifying the server with this PEM CA "
            "(default: $REVERB_TF_TLS_CA_FILE, else plaintext)",
        )
        command.add_argument("--tls_cert_file", help="client certificate (mutual TLS)")
        command.add_argument("--tls_key_file", help="its private key")
        command.add_argument(
            "--tls_server_name", help="the name to verify in the server's certificate"
        )
        command.add_argument(
            "--token_file", help="a file holding the bearer token (default: $REVERB_TF_TOKEN)"
        )
        return command

    info = with_address(
        "info",
        "show a server's tables",
        "Shows every table of a running server: size, capacity, selectors, "
        "rate limiter and counters.",
    )
    info.add_argument("--json", action="store_true", help="print JSON instead of a table")
    with_address(
        "checkpoint",
        "make a server write a checkpoint",
        "Asks a running server to write a checkpoint and prints its path.",
    )
    inspect = commands.add_parser(
        "inspect",
        help="verify a checkpoint and show what it holds",
        description="Reads a checkpoint directory record by record, verifying every "
        "checksum and decoding every item as a server would load it, and shows "
        "its tables. Needs memory for the whole checkpoint.",
    )
    inspect.add_argument("checkpoint", help="a checkpoint directory (as `checkpoint` prints)")
    inspect.add_argument("--json", action="store_true", help="print JSON instead of a table")
    bench = with_address(
        "bench",
        "a short load test against a table",
        "Inserts small items (shaped by the table's signature, else "
        "float32[4]) into one table for a while, then samples, and "
        "reports items per second. It writes into the table: use a "
        "scratch table on a production server.",
    )
    bench.add_argument("--table", required=True, help="the table to load")
    bench.add_argument("--seconds", type=float, default=5.0, help="how long to insert (default: 5)")
    bench.add_argument("--json", action="store_true", help="print JSON")
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Runs one command; returns the exit status.

    Args:
      argv: The arguments after the program name (default: sys.argv[1:]).

    Returns:
      0 on success, 1 if the command failed, 2 for a usage error.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "serve":
        from reverb_tf import _server_binary  # pylint: disable=g-import-not-at-top

        sys.argv = ["reverb_tf_server"] + argv[1:]
        _server_binary.main()  # does not return
    try:
        flags = _parser().parse_args(argv)
    except SystemExit as e:
        return EXIT_OK if e.code == 0 else EXIT_USAGE
    command = {
        "info": cmd_info,
        "checkpoint": cmd_checkpoint,
        "inspect": cmd_inspect,
        "bench": cmd_bench,
    }[flags.command]
    from reverb_tf import errors  # pylint: disable=g-import-not-at-top

    try:
        command(flags, sys.stdout)
    except (_Failure, errors.ReverbError) as e:
        # A refused call (e.g. UnauthenticatedError) says why in its message.
        reason = e if isinstance(e, _Failure) else f"{type(e).__name__}: {e}"
        print(f"reverb_tf {flags.command}: {reason}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        print(f"reverb_tf {flags.command}: interrupted", file=sys.stderr)
        return EXIT_FAILED
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
