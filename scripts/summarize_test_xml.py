# SPDX-License-Identifier: Apache-2.0
"""Sums the gtest case counts of a Bazel test run.

Bazel reports test targets; this reports the test cases inside them, from each
target's test.xml under bazel-testlogs, as one line:
"gtest: N passed, N failed". Only the targets named on the command line are
read (older runs leave other test.xml files behind, e.g. run_1_of_8/).

Usage: summarize_test_xml.py <bazel-testlogs> //pkg:target [//pkg:target ...]
"""

import pathlib
import sys
import xml.etree.ElementTree as ET


def main(testlogs: str, targets: list) -> int:
    passed = failed = 0
    for target in targets:
        package, name = target.lstrip("/").split(":")
        xml_file = pathlib.Path(testlogs) / package / name / "test.xml"
        if not xml_file.exists():
            print(f"no test.xml for {target}", file=sys.stderr)
            failed += 1
            continue
        for case in ET.parse(xml_file).getroot().iter("testcase"):
            if case.find("failure") is not None or case.find("error") is not None:
                failed += 1
            elif (
                case.get("status", "run") == "run" and case.get("result", "completed") != "skipped"
            ):
                passed += 1
    print(f"gtest: {passed} passed, {failed} failed")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2:]))
