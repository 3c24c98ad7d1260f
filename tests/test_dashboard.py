# SPDX-License-Identifier: Apache-2.0
"""The live dashboard, in a real headless browser (Debian's Chromium, driven by Playwright).

The page loads from a running server's metrics port, shows its tables, and
its charts and rates follow traffic. A screenshot is written to
$REVERB_TF_ARTIFACTS (default: the test's temporary directory), never into
the repository.
"""

import os
import pathlib
import re
import shutil
import threading

import numpy as np
import pytest
from playwright.sync_api import expect
from playwright.sync_api import sync_playwright

import reverb_tf
from integration import table, write_frames

CHROMIUM = shutil.which("chromium")
# What a rate shows once items flow: "1,234/s", "12.5/s".
POSITIVE_RATE = re.compile(r"^[1-9][\d,.]*/s$")


@pytest.fixture
def browser_page():
    if CHROMIUM is None:
        pytest.fail("Debian's chromium is missing: run scripts/setup.sh")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM, headless=True, args=["--no-sandbox"]
        )
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            errors = []
            page.on("pageerror", lambda error: errors.append(str(error)))
            yield page, errors
        finally:
            browser.close()


def test_dashboard_shows_tables_and_follows_traffic(browser_page, tmp_path):
    page, errors = browser_page
    tables = [
        reverb_tf.Table(
            "replay",
            sampler=reverb_tf.selectors.Prioritized(0.8),
            remover=reverb_tf.selectors.Fifo(),
            max_size=10_000,
            rate_limiter=reverb_tf.rate_limiters.MinSize(1),
        ),
        reverb_tf.Table.queue("queue", 100),
    ]
    with reverb_tf.Server(tables, metrics_port=0, memory_limit=64 << 20) as server:
        page.goto(f"http://localhost:{server.metrics_port}/")
        replay = page.locator('section.table[data-table="replay"]')
        expect(replay.locator(".size")).to_have_text("0 / 10,000", timeout=10_000)
        # The memory budget and how much of it is used; no log, no log line.
        expect(page.locator("#budget-limit")).to_have_text("64.0 MiB")
        expect(page.locator("#budget-share")).to_have_text("0%")
        expect(page.locator("#wal")).to_be_hidden()
        expect(replay.locator(".selectors")).to_contain_text("Prioritized(0.8)")
        expect(page.locator('section.table[data-table="queue"] .selectors')).to_contain_text(
            "max_times_sampled 1"
        )

        # Traffic: a writer inserting with priorities 1..8, a sampler reading.
        client = reverb_tf.Client(f"localhost:{server.port}")
        stop = threading.Event()

        def write():
            with client.trajectory_writer(num_keep_alive_refs=1) as writer:
                step = 0
                while not stop.is_set():
                    writer.append({"x": np.float32(step)})
                    writer.create_item(
                        "replay", float(1 + step % 8), {"x": writer.history["x"][-1]}
                    )
                    step += 1
                    if step % 50 == 0:
                        writer.flush()
                        stop.wait(0.01)

        def sample():
            while not stop.is_set():
                list(client.sample("replay", num_samples=20, emit_timesteps=False))
                stop.wait(0.01)

        threads = [threading.Thread(target=write), threading.Thread(target=sample)]
        for thread in threads:
            thread.start()
        try:
            # Rates need two polls with traffic between them; charts a point per poll.
            expect(replay.locator(".insert-rate")).to_have_text(POSITIVE_RATE, timeout=15_000)
            expect(replay.locator(".sample-rate")).to_have_text(POSITIVE_RATE, timeout=15_000)
            inserts = replay.locator('canvas[data-chart="inserts"]')
            page.wait_for_function(
                "el => Number(el.dataset.points) >= 3", arg=inserts.element_handle(), timeout=15_000
            )
            # Priorities 1..8 fill the buckets (0.5,1], (1,2], (2,4], (4,8].
            priorities = replay.locator('canvas[data-chart="priorities"]')
            page.wait_for_function(
                "el => Number(el.dataset.points) === 4",
                arg=priorities.element_handle(),
                timeout=15_000,
            )
            client.checkpoint()
            expect(page.locator("#checkpoints")).to_contain_text("1 written", timeout=10_000)
        finally:
            stop.set()
            for thread in threads:
                thread.join(timeout=30)
        size = client.server_info()["replay"].current_size
        assert size > 0
        artifacts = pathlib.Path(os.environ.get("REVERB_TF_ARTIFACTS", tmp_path))
        artifacts.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(artifacts / "dashboard.png"), full_page=True)

        # The server stops: the page says it cannot read the metrics.
    expect(page.locator("#status")).to_contain_text("cannot read /metrics", timeout=10_000)
    assert errors == [], errors


def test_dashboard_shows_the_spill_directory(browser_page, tmp_path):
    page, errors = browser_page
    with reverb_tf.Server(
        [table("frames", max_size=10_000)],
        metrics_port=0,
        memory_limit=4 << 20,
        spill_dir=str(tmp_path / "spill"),
    ) as server:
        page.goto(f"http://localhost:{server.metrics_port}/")
        expect(page.locator("#spill")).to_be_visible(timeout=10_000)
        client = reverb_tf.Client(f"localhost:{server.port}")
        write_frames(client, "frames", 400)  # 11 MB under a 4 MiB budget
        list(client.sample("frames", num_samples=200, emit_timesteps=False))
        stats = server.spill_stats()
        assert stats["disk_bytes"] > 0 and stats["disk_reads"] > 0, stats
        expect(page.locator("#spill-disk")).to_contain_text("MiB", timeout=10_000)
        expect(page.locator("#spill-hits")).to_have_text(re.compile(r"^\d+%$"), timeout=10_000)
        expect(page.locator("#spill-latency")).to_have_text(re.compile(r"^\d+ µs$"))
        expect(page.locator("#spill-failing")).to_have_text("")
    assert errors == [], errors
