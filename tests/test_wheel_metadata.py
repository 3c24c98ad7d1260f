# SPDX-License-Identifier: Apache-2.0
"""The wheel's licence metadata (Metadata 2.4) and the licence files it ships.

In a checkout these run pip_package/build_pip_package.py's functions on a
fake staged wheel (no Bazel build needed) and check that this machine has
every licence source the real build copies. Against an installed wheel
(REVERB_TF_TEST_INSTALLED=1, scripts/check_wheel.sh --pytest) they check
the installed distribution's metadata instead.
"""

import email.parser
import importlib.metadata
import importlib.util
import pathlib
import re
import types
import zipfile

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
BUILDER = ROOT / "pip_package" / "build_pip_package.py"
checkout_only = pytest.mark.checkout_only(
    reason="the wheel builder is not part of the installed package"
)
installed_only = pytest.mark.installed_only(
    reason="needs an installed wheel (scripts/check_wheel.sh --pytest)"
)


@pytest.fixture(scope="module")
def builder() -> types.ModuleType:
    """pip_package/build_pip_package.py, imported from its path."""
    spec = importlib.util.spec_from_file_location("build_pip_package", BUILDER)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def fake_sources(builder: types.ModuleType, base: pathlib.Path) -> dict:
    """Every licence source write_licenses reads, as distinct small files under base."""
    project, docs, common = base / "project", base / "doc", base / "common-licenses"
    for name in builder.PROJECT_LICENSE_FILES:
        (project / name).parent.mkdir(parents=True, exist_ok=True)
        (project / name).write_text(f"text of {name}\n")
    for package in builder.DEBIAN_COPYRIGHTS.values():
        (docs / package).mkdir(parents=True)
        (docs / package / "copyright").write_text(f"copyright of {package}\n")
    common.mkdir()
    for text in builder.COMMON_LICENSES.values():
        (common / text).write_text(f"licence {text}\n")
    nanobind = base / "nanobind-LICENSE"
    nanobind.write_text("nanobind licence\n")
    robin_map = base / "robin_map-LICENSE"
    robin_map.write_text("robin_map licence\n")
    return {
        "project_root": project,
        "doc_root": docs,
        "common_licenses": common,
        "nanobind": nanobind,
        "robin_map": robin_map,
    }


def build_fake_wheel(builder: types.ModuleType, base: pathlib.Path) -> pathlib.Path:
    """A wheel zipped by the builder from a staged tree with its dist-info and licences."""
    sources = fake_sources(builder, base)
    root = base / "wheel"
    (root / "reverb_tf").mkdir(parents=True)
    (root / "reverb_tf" / "__init__.py").write_text('__version__ = "0.0.1"\n')
    info_name = "reverb_tf-0.0.1.dist-info"
    license_files = builder.write_licenses(root / info_name, **sources)
    info = builder.write_dist_info(
        root,
        "0.0.1",
        ["numpy"],
        tag="cp311-cp311-linux_x86_64",
        python_requires="==3.11.*",
        license_files=license_files,
    )
    assert info.name == info_name
    wheel = base / "reverb_tf-0.0.1-cp311-cp311-linux_x86_64.whl"
    builder.zip_wheel(root, info, wheel, builder.ZIP_EPOCH)
    return wheel


def wheel_contents(wheel: pathlib.Path):
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        metadata = archive.read("reverb_tf-0.0.1.dist-info/METADATA").decode()
        texts = {n: archive.read(n).decode() for n in names if "/licenses/" in n}
    return names, metadata, texts


@checkout_only
def test_metadata_declares_apache_and_lists_every_licence_file(builder, tmp_path):
    names, metadata, texts = wheel_contents(build_fake_wheel(builder, tmp_path))
    fields = email.parser.Parser().parsestr(metadata)
    assert fields["Metadata-Version"] == "2.4"
    assert fields["License-Expression"] == "Apache-2.0"
    assert fields.get_all("License-File") == builder.expected_license_files()
    # Each declared file is in the wheel with its source's content.
    prefix = "reverb_tf-0.0.1.dist-info/licenses/"
    assert texts[prefix + "LICENSE"] == "text of LICENSE\n"
    assert texts[prefix + "THIRD_PARTY_NOTICES.md"] == "text of THIRD_PARTY_NOTICES.md\n"
    assert texts[prefix + "third_party/grpc.copyright"] == "copyright of libgrpc-dev\n"
    assert texts[prefix + "third_party/libmicrohttpd.LGPL-2.1.txt"] == "licence LGPL-2.1\n"
    assert texts[prefix + "third_party/nanobind.LICENSE"] == "nanobind licence\n"
    assert texts[prefix + "third_party/robin_map.LICENSE"] == "robin_map licence\n"
    assert sorted(n[len(prefix) :] for n in texts) == builder.expected_license_files()
    # RECORD covers them like every other file.
    with zipfile.ZipFile(tmp_path / "reverb_tf-0.0.1-cp311-cp311-linux_x86_64.whl") as archive:
        record = archive.read("reverb_tf-0.0.1.dist-info/RECORD").decode()
    assert f"{prefix}LICENSE,sha256=" in record
    builder.check_licenses(names, metadata)  # the build's own check passes


def without_line(line: str):
    """A damage that drops one line from METADATA."""
    return lambda names, metadata: (names, metadata.replace(line + "\n", ""))


@checkout_only
@pytest.mark.parametrize(
    "damage, message",
    [
        (without_line("License-Expression: Apache-2.0"), "no License-Expression"),
        (
            lambda names, metadata: (
                names,
                metadata.replace("Metadata-Version: 2.4", "Metadata-Version: 2.1"),
            ),
            "Metadata-Version is not 2.4",
        ),
        (
            lambda names, metadata: (
                [n for n in names if not n.endswith("licenses/LICENSE")],
                metadata,
            ),
            "not in reverb_tf-0.0.1.dist-info/licenses/: ['LICENSE']",
        ),
        (without_line("License-File: third_party/zstd.copyright"), "License-File entries"),
    ],
)
def test_check_rejects_a_wheel_without_its_licences(builder, tmp_path, damage, message):
    names, metadata, _ = wheel_contents(build_fake_wheel(builder, tmp_path))
    names, metadata = damage(names, metadata)
    with pytest.raises(SystemExit, match=re.escape(message)):
        builder.check_licenses(names, metadata)


@checkout_only
def test_a_missing_licence_source_fails_the_build(builder, tmp_path):
    sources = fake_sources(builder, tmp_path)
    (sources["doc_root"] / "libre2-dev" / "copyright").unlink()
    with pytest.raises(SystemExit, match="libre2-dev/copyright"):
        builder.write_licenses(tmp_path / "info", **sources)


@checkout_only
def test_this_machine_has_every_licence_source(builder, tmp_path):
    """What the real build copies: Debian's copyright files, nanobind's and robin_map's, ours."""
    copied = builder.write_licenses(tmp_path / "info", ROOT)
    assert copied == builder.expected_license_files()
    licenses = tmp_path / "info" / "licenses"
    assert "Apache License" in (licenses / "LICENSE").read_text()
    assert (
        "GNU LESSER GENERAL PUBLIC LICENSE"
        in (licenses / "third_party" / "libmicrohttpd.LGPL-2.1.txt").read_text()
    )
    assert "Wenzel Jakob" in (licenses / "third_party" / "nanobind.LICENSE").read_text()
    robin_map = (licenses / "third_party" / "robin_map.LICENSE").read_text()
    assert robin_map.startswith("MIT License\n") and "Goetghebuer-Planchon" in robin_map
    assert "*" not in robin_map  # the header comment's decoration is gone
    assert "grpc" in (licenses / "third_party" / "grpc.copyright").read_text().lower()


@checkout_only
@pytest.mark.parametrize(
    "abi, version, tags",
    [
        ("cpython", (3, 11, 2), ("cp311", "cp311", "==3.11.*")),
        ("cpython", (3, 14, 0), ("cp314", "cp314", "==3.14.*")),
        # A stable-ABI extension built by any newer interpreter: one wheel
        # for 3.12 and later.
        ("abi3", (3, 12, 0), ("cp312", "abi3", ">=3.12")),
        ("abi3", (3, 13, 5), ("cp312", "abi3", ">=3.12")),
    ],
)
def test_wheel_tags_follow_the_extension_abi(builder, abi, version, tags):
    assert builder.wheel_tags(abi, version) == tags


@checkout_only
def test_an_abi3_wheel_is_not_built_by_an_older_python(builder):
    with pytest.raises(SystemExit, match="needs Python >= "):
        builder.wheel_tags("abi3", (3, 11, 2))


@checkout_only
@pytest.mark.parametrize(
    "text, abi",
    [
        ("abi3 3.13\n", ("abi3", (3, 13))),
        # Another CPython's headers (REVERB_TF_PYTHON_HEADERS) name the
        # version, not the interpreter that runs the builder.
        ("cpython 3.14\n", ("cpython", (3, 14))),
    ],
)
def test_the_extension_abi_names_the_headers_version(builder, tmp_path, text, abi):
    manifest = tmp_path / "reverb_tf/cc/python/extension_abi.txt"
    manifest.parent.mkdir(parents=True)
    manifest.write_text(text)
    assert builder.extension_abi(tmp_path) == abi


@checkout_only
@pytest.mark.parametrize("text", ["abi3\n", "limited 3.12\n", "abi3 3\n"])
def test_an_unknown_extension_abi_stops_the_build(builder, tmp_path, text):
    manifest = tmp_path / "reverb_tf/cc/python/extension_abi.txt"
    manifest.parent.mkdir(parents=True)
    manifest.write_text(text)
    with pytest.raises(SystemExit, match="extension_abi.txt says"):
        builder.extension_abi(tmp_path)


@checkout_only
def test_license_is_the_apache_2_text_and_notices_name_every_shipped_file(builder):
    text = (ROOT / "LICENSE").read_text()
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text
    notices = (ROOT / "THIRD_PARTY_NOTICES.md").read_text()
    for name in builder.expected_license_files():
        if name.startswith("third_party/"):
            assert f"`{name}`" in notices, name
    for package in builder.DEBIAN_COPYRIGHTS.values():
        assert package in notices, package


@checkout_only
@pytest.mark.parametrize(
    "built, admitted, refused",
    [
        ("2.21.0", ["2.21.0", "2.21.1"], ["2.20.0", "2.22.0", "2.22.0rc0"]),
        # Built against a release candidate: the extra must admit it.
        ("2.22.0-rc0", ["2.22.0rc0", "2.22.0rc1", "2.22.0", "2.22.1"], ["2.21.0", "2.23.0rc0"]),
    ],
)
def test_tensorflow_extras_pin_the_build_minor_version(builder, built, admitted, refused):
    from packaging.requirements import Requirement

    extras = builder.tensorflow_extras(
        {"tensorflow_version": built, "tensorflow_distribution": "tensorflow-cpu"}
    )
    assert sorted(extras) == ["tensorflow", "tensorflow-cpu"]
    for name, (requirement,) in extras.items():
        specifier = Requirement(requirement).specifier
        assert Requirement(requirement).name == name
        assert [v for v in admitted if v not in specifier] == [], requirement
        assert [v for v in refused if v in specifier] == [], requirement


@installed_only
def test_installed_wheel_declares_its_licences():
    distribution = importlib.metadata.distribution("reverb-tf")
    assert distribution.metadata["License-Expression"] == "Apache-2.0"
    declared = distribution.metadata.get_all("License-File")
    assert "LICENSE" in declared and "THIRD_PARTY_NOTICES.md" in declared
    files = {str(f) for f in distribution.files}
    for name in declared:
        matches = [f for f in files if f.endswith(f".dist-info/licenses/{name}")]
        assert matches, (name, sorted(files)[:20])
        assert distribution.locate_file(matches[0]).stat().st_size > 0
