# SPDX-License-Identifier: Apache-2.0
"""The native layers depend on each other only as docs/design.md draws them.

Layers, bottom up: the core (reverb_tf/cc/ itself, platform/, selectors/,
rate_limiters/), the wire (proto/, wire/, and security/ beside it),
checkpointing/, the service (service/), the client (client/, patterns/),
TensorFlow (ops/, kernels/), Python (python/). Non-test code of a layer may
include and depend on its own layer and those below; the core includes no
gRPC, protobuf or TensorFlow header; the kernels include only the facades
of ours. Checked three times: every `#include "reverb_tf/..."` of a non-test
source, every namespace a non-test source opens (a forward declaration,
`namespace proto { class InsertRequest; }`, depends on the layer that
defines the type as much as an include does, and the include check cannot
see it), and every label in the `deps` of a non-test Bazel target.
"""

import pathlib
import re
from typing import Dict, List, Optional, Tuple

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.checkout_only(reason="reads the C++ sources and BUILD files")
CC = ROOT / "reverb_tf" / "cc"

# Directory (relative to the repository) -> layer.
_LAYERS: Dict[str, int] = {
    "reverb_tf/cc": 1,
    "reverb_tf/cc/platform": 1,
    "reverb_tf/cc/selectors": 1,
    "reverb_tf/cc/rate_limiters": 1,
    "reverb_tf/cc/proto": 2,
    "reverb_tf/cc/wire": 2,
    "reverb_tf/cc/security": 2,
    "reverb_tf/cc/checkpointing": 3,
    "reverb_tf/cc/service": 4,
    "reverb_tf/cc/client": 5,
    "reverb_tf/cc/patterns": 5,
    "ops": 6,
    "kernels": 6,
    "reverb_tf/cc/python": 7,
}
# Test support: used by tests only, not checked as a layer.
_TEST_ONLY = ("reverb_tf/cc/testing", "reverb_tf/cc/fuzzing")
_FACADES = {
    "reverb_tf/cc/client/tf_facade.h",
    "reverb_tf/cc/patterns/pattern_facade.h",
    "reverb_tf/cc/platform/export.h",
}
_FOREIGN_IN_CORE = ("grpc", "grpcpp/", "google/protobuf/", "tensorflow/")
# Namespace -> the lowest layer whose code defines names in it. The
# generated protos put their messages in reverb_tf::proto, ::schema and
# ::patterns (the wire layer), so a lower layer that opens one of them to
# declare a message takes on the wire layer.
_NAMESPACE_LAYERS: Dict[str, int] = {"proto": 2, "schema": 2, "patterns": 2}
# Namespaces of the libraries the core includes nothing of.
_FOREIGN_NAMESPACES = ("grpc", "grpc_impl", "google", "tensorflow")
# What the shared object ships: every layer in one target, packaging rather
# than code of the core.
_BUNDLES = {("reverb_tf/cc", "reverb_tf_all")}


def _layer(directory: str) -> Optional[int]:
    return _LAYERS.get(directory.rstrip("/"))


def _is_test(path: pathlib.Path) -> bool:
    return path.stem.endswith("_test") or path.stem.endswith("_bench")


def _sources() -> List[pathlib.Path]:
    files = []
    for top in (CC, ROOT / "ops", ROOT / "kernels"):
        files += [p for p in top.rglob("*") if p.suffix in (".h", ".cc") and not _is_test(p)]
    return [p for p in files if not str(p.relative_to(ROOT)).startswith(_TEST_ONLY)]


def _include_violations() -> List[str]:
    found = []
    for source in _sources():
        here = str(source.parent.relative_to(ROOT))
        mine = _layer(here)
        assert mine is not None, f"{source}: a directory docs/design.md does not place"
        for number, line in enumerate(source.read_text().splitlines(), 1):
            match = re.match(r'\s*#include\s+[<"]([^>"]+)[>"]', line)
            if not match:
                continue
            header = match.group(1)
            where = f"{source.relative_to(ROOT)}:{number}: {header}"
            if mine == 1 and header.startswith(_FOREIGN_IN_CORE):
                found.append(f"{where} (the core includes no gRPC, protobuf or TensorFlow)")
            if here == "kernels" and header.startswith("reverb_tf/") and header not in _FACADES:
                found.append(f"{where} (kernels include only the facades)")
            if not header.startswith("reverb_tf/"):
                continue
            theirs = _layer(str(pathlib.PurePosixPath(header).parent))
            if theirs is None:
                found.append(f"{where} (a test-only or unknown directory)")
            elif theirs > mine:
                found.append(f"{where} (layer {mine} includes layer {theirs})")
    return found


def _namespace_violations_in(text: str, where: str, mine: int) -> List[str]:
    """The namespaces that `text`, code of layer `mine`, may not open."""
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        match = re.match(r"\s*namespace\s+([\w:]+)\s*\{", line)
        if not match:
            continue
        # `namespace reverb_tf::proto {` opens proto as much as a nested block.
        for name in match.group(1).split("::"):
            at = f"{where}:{number}: namespace {name}"
            if mine == 1 and name in _FOREIGN_NAMESPACES:
                found.append(f"{at} (the core declares nothing of gRPC, protobuf or TensorFlow)")
            theirs = _NAMESPACE_LAYERS.get(name)
            if theirs is not None and theirs > mine:
                found.append(f"{at} (layer {mine} declares into layer {theirs})")
    return found


def _namespace_violations() -> List[str]:
    found = []
    for source in _sources():
        mine = _layer(str(source.parent.relative_to(ROOT)))
        assert mine is not None, f"{source}: a directory docs/design.md does not place"
        found += _namespace_violations_in(source.read_text(), str(source.relative_to(ROOT)), mine)
    return found


def _targets(build: pathlib.Path) -> List[Tuple[str, str, List[str]]]:
    """(rule, name, deps) of each rule in a BUILD file, from its text."""
    rules = []
    text = build.read_text()
    for match in re.finditer(r"^(\w+)\(\s*\n(.*?)^\)", text, re.S | re.M):
        rule, body = match.group(1), match.group(2)
        name = re.search(r'name\s*=\s*"([^"]+)"', body)
        deps = re.search(r"\bdeps\s*=\s*\[(.*?)\]", body, re.S)
        rules.append(
            (
                rule,
                name.group(1) if name else "",
                re.findall(r'"([^"]+)"', deps.group(1)) if deps else [],
            )
        )
    return rules


def _dependency_violations() -> List[str]:
    found = []
    for build in [*CC.rglob("BUILD"), ROOT / "ops" / "BUILD", ROOT / "kernels" / "BUILD"]:
        package = str(build.parent.relative_to(ROOT))
        mine = _layer(package)
        if mine is None or package.startswith(_TEST_ONLY):
            continue
        for rule, name, deps in _targets(build):
            if rule in ("cc_test", "cc_binary") or name.endswith(("_test", "_bench")):
                continue  # tests and binaries may use any layer below Python
            if (package, name) in _BUNDLES:
                continue
            for dep in deps:
                if not dep.startswith("//reverb_tf/cc"):
                    continue
                dep_package = dep[2:].split(":")[0]
                theirs = _layer(dep_package)
                if dep_package.startswith(_TEST_ONLY):
                    found.append(f"{package}:{name} -> {dep} (test-only)")
                elif theirs is not None and theirs > mine:
                    found.append(f"{package}:{name} -> {dep} (layer {mine} depends on {theirs})")
    return found


def test_includes_follow_the_layers():
    assert _include_violations() == []


def test_forward_declarations_follow_the_layers():
    assert _namespace_violations() == []


def test_bazel_dependencies_follow_the_layers():
    assert _dependency_violations() == []


def test_the_checks_see_the_code():
    # They would pass vacuously if the walk found nothing.
    sources = _sources()
    assert len(sources) > 100
    assert any(p.name == "server.cc" for p in sources)
    service = [t for t in _targets(CC / "service" / "BUILD") if t[1] == "server"]
    assert service and "//reverb_tf/cc:table" in service[0][2]
    declared = "namespace reverb_tf {\nnamespace proto {\nclass InsertRequest;\n}\n}\n"
    assert _namespace_violations_in(declared, "core.h", 1) == [
        "core.h:2: namespace proto (layer 1 declares into layer 2)"
    ]
    assert _namespace_violations_in("namespace reverb_tf::schema {", "core.h", 1)
    assert _namespace_violations_in("namespace grpc {", "core.h", 1)
    assert _namespace_violations_in(declared, "client.h", 5) == []
