"""The wheels of `make wheel`: one per platform, carrying dataprep,
ckptmerge and ferry-serve beside the ferry package.

The amd64 wheel is installed with pip into a fresh venv and the commands run
from its PATH, with no Go on it; the arm64 one is checked for its file list,
its tags and the ELF headers of its binaries. The runtime dependencies
(numpy, torch) are not downloaded again: the fresh venv sees the test venv's
site-packages through a .pth file placed after its own, so `import ferry`
must find the wheel's copy first.
"""
import os
import re
import shutil
import struct
import subprocess
import sys
import sysconfig
import zipfile

import pytest

from helpers import REPO, need

COMMANDS = ("dataprep", "ckptmerge", "ferry-serve")
EM_X86_64, EM_AARCH64 = 62, 183


def source_version():
    with open(os.path.join(REPO, "python", "ferry", "__init__.py")) as f:
        return re.search(r'^__version__ = "([^"]+)"', f.read(), re.M).group(1)


@pytest.fixture(scope="module")
def wheels(tmp_path_factory):
    need("go (to build the wheels' binaries)", shutil.which("go"))
    need("make", shutil.which("make"))
    out = tmp_path_factory.mktemp("dist")
    r = subprocess.run(["make", "-s", "wheel", f"WHEEL_DIR={out}", f"WHEEL_PYTHON={sys.executable}"], cwd=REPO,
                       capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, f"make wheel failed:\n{r.stdout}\n{r.stderr}"
    version = source_version()
    found = {}
    for name in os.listdir(out):
        m = re.fullmatch(rf"ferry-{re.escape(version)}-py3-none-(.+)\.whl", name)
        assert m, f"unexpected file in the wheel directory: {name}"
        found["arm64" if "aarch64" in m.group(1) else "amd64"] = os.path.join(out, name)
    assert sorted(found) == ["amd64", "arm64"], os.listdir(out)
    return version, found


def test_make_wheel_on_a_machine_without_the_test_venv(tmp_path):
    """`make wheel` needs neither the test venv nor a PYTHON: it makes its own
    small build environment under $FERRY_CACHE (setuptools from the package
    index), and says in one line what is missing when it cannot."""
    need("go (to build the wheels' binaries)", shutil.which("go"))
    need("make", shutil.which("make"))
    venv_bin = os.path.dirname(sys.executable)
    path = os.pathsep.join(p for p in os.environ["PATH"].split(os.pathsep) if p != venv_bin)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHON", "FERRY_PYTHON", "VIRTUAL_ENV", "PYTHONPATH")}
    env.update(PATH=path, FERRY_CACHE=str(tmp_path / "cache"),
               WHEEL_PLATFORMS="amd64:manylinux_2_17_x86_64.manylinux2014_x86_64")
    out = tmp_path / "dist"
    r = subprocess.run(["make", "-s", "wheel", f"WHEEL_DIR={out}", "PYTHON="], cwd=REPO, env=env,
                       capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, f"make wheel failed:\n{r.stdout}\n{r.stderr}"
    assert [n for n in os.listdir(out) if n.endswith(".whl")] == \
        [f"ferry-{source_version()}-py3-none-manylinux_2_17_x86_64.manylinux2014_x86_64.whl"], os.listdir(out)
    assert (tmp_path / "cache" / "build-venv" / ".ferry-complete").exists()

    r = subprocess.run(["make", "-s", "wheel", f"WHEEL_DIR={out}", "GO=/nonexistent/go"], cwd=REPO, env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode != 0
    said = [line for line in r.stderr.splitlines() if line.startswith("build-wheel:")]
    assert len(said) == 1 and "missing Go" in said[0], r.stderr


def elf_machine(data):
    assert data[:4] == b"\x7fELF", "not an ELF file"
    assert data[4] == 2 and data[5] == 1, "not a 64-bit little-endian ELF file"
    (etype, machine) = struct.unpack_from("<HH", data, 16)
    assert etype == 2, f"ELF type {etype}, want ET_EXEC (a static executable)"
    return machine


@pytest.mark.parametrize("arch,machine,tag", [("amd64", EM_X86_64, "manylinux_2_17_x86_64"),
                                              ("arm64", EM_AARCH64, "manylinux_2_17_aarch64")])
def test_wheel_contents(wheels, arch, machine, tag):
    version, found = wheels
    path = found[arch]
    assert tag in os.path.basename(path) and "manylinux2014" in os.path.basename(path)
    with zipfile.ZipFile(path) as z:
        names = set(z.namelist())
        wheel_meta = z.read(f"ferry-{version}.dist-info/WHEEL").decode()
        assert "Root-Is-Purelib: false" in wheel_meta
        assert f"Tag: py3-none-{tag}" in wheel_meta
        record = z.read(f"ferry-{version}.dist-info/RECORD").decode()
        src = sorted(n for n in os.listdir(os.path.join(REPO, "python", "ferry")) if n.endswith(".py"))
        assert sorted(n[len("ferry/"):] for n in names if n.startswith("ferry/")) == src
        for cmd in COMMANDS:
            member = f"ferry-{version}.data/scripts/{cmd}"
            assert member in names, f"{member} missing from {os.path.basename(path)}"
            assert member + ",sha256=" in record
            info = z.getinfo(member)
            assert (info.external_attr >> 16) & 0o111, f"{member} is not executable"
            with z.open(member) as f:
                head = f.read(64)
            assert elf_machine(head) == machine, f"{member}: ELF machine {elf_machine(head)}, want {machine}"
        meta = z.read(f"ferry-{version}.dist-info/METADATA").decode()
        assert f"Version: {version}" in meta


def test_wheel_installs_without_go(wheels, tmp_path):
    version, found = wheels
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    py = venv / "bin" / "python"
    # pip of the test venv installs into the fresh one (--python); nothing from the network
    r = subprocess.run([sys.executable, "-m", "pip", "--python", str(py), "install", "-q", "--no-deps", "--no-index",
                        found["amd64"]], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    purelib = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    with open(os.path.join(purelib, "zz_test_deps.pth"), "w") as f:
        f.write(sysconfig.get_paths()["purelib"] + "\n")  # numpy and torch, after the venv's own packages
    path = f"{venv / 'bin'}:/usr/bin:/bin"
    assert shutil.which("go", path=path) is None, "go is on the PATH of the install test"
    env = {"PATH": path, "HOME": str(tmp_path), "LANG": "C.UTF-8"}
    commit = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=REPO, capture_output=True,
                            text=True).stdout.strip()
    for cmd in COMMANDS:
        exe = shutil.which(cmd, path=path)
        assert exe == str(venv / "bin" / cmd), f"{cmd} on the PATH is {exe}"
        r = subprocess.run([cmd, "--version"], env=env, capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        want = f"{cmd} {version} (commit {commit or 'unknown'}, "
        assert r.stdout.startswith(want) and "linux/amd64" in r.stdout, f"{cmd} --version: {r.stdout!r}, want {want}..."
    # the commands work, not only --version
    r = subprocess.run(["ckptmerge", "inspect", os.path.join(REPO, "testdata", "dcp", "torch2-ws4")], env=env,
                       capture_output=True, text=True)
    assert r.returncode == 0 and "tensors" in r.stdout + r.stderr, r.stdout + r.stderr
    r = subprocess.run(["python", "-c", "import ferry, sys; print(ferry.__version__, ferry.__file__)"], env=env,
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    got_version, got_file = r.stdout.split()
    assert got_version == version and got_file.startswith(purelib), r.stdout
    # the package finds the wheel's commands beside it when the venv's bin is
    # not on PATH (a Ray worker or a cron job started with venv/bin/python)
    for cmd in COMMANDS:
        r = subprocess.run([str(py), "-c", f"import ferry._commands as c; print(c.find({cmd!r}))"],
                           env=dict(env, PATH="/usr/bin:/bin"), capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        assert r.stdout.strip() == str(venv / "bin" / cmd), r.stdout
