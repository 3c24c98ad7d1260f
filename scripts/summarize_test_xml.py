"""Sums the gtest case counts of a Bazel test run.

Bazel reports test targets; this reports the test cases inside them, from the
test.xml files under bazel-testlogs, as one line: "gtest: N passed, N failed".
"""
import pathlib
import sys
import xml.etree.ElementTree as ET


def main(testlogs: str) -> int:
    passed = failed = 0
    for xml_file in pathlib.Path(testlogs).rglob("test.xml"):
        root = ET.parse(xml_file).getroot()
        for case in root.iter("testcase"):
            if case.find("failure") is not None or case.find("error") is not None:
                failed += 1
            elif case.get("status", "run") == "run" and case.get("result", "completed") != "skipped":
                passed += 1
    print(f"gtest: {passed} passed, {failed} failed")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
