"""`pip install` of the Python module with no network, as python/README.md tells users to do it:
from the tree into venvs of Debian's python3 (with and without its system packages, with and
without build isolation) and of every other CPython >= 3.9 found here (refused cleanly when
below pyproject.toml's requires-python), and from an sdist away from the tree; then
`import ferry` from outside the tree and a put/get through a ferryd.

pip runs as on a fresh machine: no config file, no $PIP_FIND_LINKS, no cache, --no-index. The
tests but the first (the README's way since before pyproject.toml) give --use-pep517, which
pip >= 23.1 implies when wheel is missing: Debian's pip 23.0.1 would otherwise fall back to a
deprecated `setup.py install` (a no-op now that pyproject.toml is there)."""

import base64
import glob
import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile

import pytest

from conftest import plain_env

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BACKEND_DIR = os.path.join(REPO, "python", "_build")
DEBIAN_PYTHON = "/usr/bin/python3"
PUT_GET = (
    "import ferry, sys\n"
    "assert ferry.__file__.startswith(sys.prefix), ferry.__file__\n"
    "with ferry.Client(sys.argv[1]) as c:\n"
    "    c.put('install-check', b'bytes through ferry')\n"
    "    print(bytes(c.get('install-check', timeout_ms=5000)).decode())\n"
)


def run(cmd, timeout=120, **kwargs):
    """Runs cmd in the workdir's environment (pip_env); AssertionError with its output when it
    fails. Returns its stdout."""
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=timeout, env=pip_env(), **kwargs)
    assert proc.returncode == 0, "%s failed (%d):\n%s" % (cmd, proc.returncode, proc.stdout)
    return proc.stdout


def pip_env():
    """The environment of a machine with no pip configuration and no PYTHONPATH."""
    env = plain_env()
    for name in list(env):
        if name.startswith("PIP_") or name in ("PYTHONPATH", "PYTHONHOME"):
            del env[name]
    env.update(PIP_CONFIG_FILE=os.devnull, PIP_NO_CACHE_DIR="1", PIP_DISABLE_PIP_VERSION_CHECK="1")
    return env


def copy_tree(workdir):
    """A copy of what the build reads (python/, include/, src/client, src/common), so that a
    build cannot change the tree; returns its python/."""
    src = os.path.join(workdir, "tree")
    for part in ("python", "include", os.path.join("src", "client"), os.path.join("src", "common")):
        shutil.copytree(os.path.join(REPO, part), os.path.join(src, part),
                        ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    return os.path.join(src, "python")


def make_venv(python, workdir, *options):
    """A venv of python (with pip, from ensurepip) in workdir/venv; returns its interpreter."""
    venv = os.path.join(workdir, "venv")
    run([python, "-m", "venv", *options, venv], cwd=workdir)
    return os.path.join(venv, "bin", "python")


def pip_install(py, target, workdir, *options):
    run([py, "-m", "pip", "install", "--no-index", *options, target],
        timeout=180, cwd=workdir)


def check_put_get(py, daemon, workdir):
    """ferry, imported by py from its venv (not the tree), stores and reads bytes."""
    assert run([py, "-c", PUT_GET, daemon.socket], cwd=workdir).strip() == "bytes through ferry"


def test_pip_install_into_a_venv(workdir, daemon):
    py = make_venv(DEBIAN_PYTHON, workdir, "--system-site-packages")
    pip_install(py, copy_tree(workdir), workdir)
    script = (
        "import ferry, numpy, sys\n"
        "assert ferry.__file__.startswith(sys.prefix), ferry.__file__\n"
        "with ferry.Client(sys.argv[1]) as c:\n"
        "    oid = c.put_object({'a': numpy.arange(5)})\n"
        "    print(c.get_object(oid)['a'].sum())\n"
    )
    assert run([py, "-c", script, daemon.socket], cwd=workdir).strip() == "10"


@pytest.mark.parametrize("isolation", ["isolated", "no-build-isolation"])
def test_pip_install_into_a_plain_venv(workdir, daemon, isolation):
    # Debian's python3's venv without its system packages: pip and setuptools, no wheel.
    py = make_venv(DEBIAN_PYTHON, workdir)
    options = ["--no-build-isolation"] if isolation == "no-build-isolation" else []
    pip_install(py, copy_tree(workdir), workdir, "--use-pep517", *options)
    check_put_get(py, daemon, workdir)


def call_backend(hook, out_dir, backend_dir=BACKEND_DIR):
    """ferry_build.hook(out_dir) in a process of this interpreter, as pip calls a hook: the
    CompletedProcess, stdout and stderr together, the hook's value its last line."""
    code = ("import sys; sys.path.insert(0, sys.argv[1]); import ferry_build; "
            "print(getattr(ferry_build, sys.argv[2])(sys.argv[3]))")
    return subprocess.run([sys.executable, "-c", code, backend_dir, hook, out_dir], text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=120,
                          env=pip_env(), cwd=out_dir)


def built(hook, out_dir):
    """The path of what ferry_build.hook (build_wheel, build_sdist) of the tree made in out_dir."""
    proc = call_backend(hook, out_dir)
    assert proc.returncode == 0, proc.stdout
    return os.path.join(out_dir, proc.stdout.split()[-1])


def test_sdist_installs_on_its_own(workdir, daemon):
    made = os.path.join(workdir, "made")
    os.mkdir(made)
    sdist = built("build_sdist", made)
    with tarfile.open(sdist) as tar:
        names = tar.getnames()
    top = os.path.basename(sdist)[:-len(".tar.gz")]
    for needed in ("PKG-INFO", "pyproject.toml", "_build/ferry_build.py", "ferry/__init__.py",
                   "_ferry/module.c", "csrc/include/ferry.h", "csrc/src/client/client.c",
                   "csrc/src/common/proto.h"):
        assert "%s/%s" % (top, needed) in names
    assert not [n for n in names if not n.startswith(top + "/") or n.endswith((".so", ".o"))]
    elsewhere = os.path.join(workdir, "elsewhere")
    os.mkdir(elsewhere)
    copy = shutil.copy(sdist, elsewhere)
    shutil.rmtree(made)
    py = make_venv(DEBIAN_PYTHON, workdir)
    pip_install(py, copy, elsewhere, "--use-pep517")
    check_put_get(py, daemon, elsewhere)


def test_wheel_matches_its_record(workdir):
    with zipfile.ZipFile(built("build_wheel", workdir)) as whl:
        names = whl.namelist()
        record = whl.read(next(n for n in names if n.endswith(".dist-info/RECORD"))).decode()
        rows = [line.split(",") for line in record.splitlines()]
        assert sorted(r[0] for r in rows) == sorted(names)
        for path, digest, size in rows:
            if not path.endswith("RECORD"):
                assert (digest, size) == record_hash(whl.read(path)), path
    assert any(n.startswith("ferry/_ferry.") and n.endswith(".so") for n in names)


def record_hash(data):
    """("sha256=<urlsafe base64, no padding>", "<size>") as a wheel's RECORD says of data."""
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return "sha256=" + digest, str(len(data))


def test_version_mismatch_fails_the_build(workdir):
    python = copy_tree(workdir)
    init = os.path.join(python, "ferry", "__init__.py")
    with open(init) as f:
        text = f.read()
    with open(init, "w") as f:
        f.write(text.replace("__version__ = \"", "__version__ = \"9", 1))
    proc = call_backend("prepare_metadata_for_build_wheel", workdir, os.path.join(python, "_build"))
    assert proc.returncode != 0 and "ferry.h says version" in proc.stdout, proc.stdout


def backend():
    """The tree's ferry_build module."""
    sys.path.insert(0, BACKEND_DIR)
    try:
        import ferry_build
    finally:
        sys.path.remove(BACKEND_DIR)
    return ferry_build


def test_backend_reads_pyproject_as_tomllib_does():
    tomllib = pytest.importorskip("tomllib")
    path = os.path.join(REPO, "python", "pyproject.toml")
    with open(path, "rb") as f:
        assert backend().read_pyproject_subset(path) == tomllib.load(f)


def minimum_python():
    """pyproject.toml's requires-python, ">=X.Y", as (X, Y)."""
    spec = backend().project()["requires-python"]
    assert spec.startswith(">=") and "," not in spec, spec
    return tuple(int(p) for p in spec[2:].split("."))


PROBE = ("import os, sys, sysconfig; print(sys.implementation.name, *sys.version_info[:3], "
         "sys.executable, sys.base_prefix, "
         "os.path.isfile(os.path.join(sysconfig.get_paths()['include'], 'Python.h')))")


def other_interpreters():
    """pytest params (interpreter, (major, minor), has Python.h) of the CPythons >= 3.9 here
    besides Debian's (pyenv's, python3.N on PATH outside /usr), one per installation, by
    version; a single skipped param when there is none."""
    pyenv = os.environ.get("PYENV_ROOT") or os.path.expanduser("~/.pyenv")
    candidates = glob.glob(os.path.join(pyenv, "versions", "3.*", "bin", "python3"))
    candidates += [shutil.which("python3.%d" % minor) for minor in range(9, 20)]
    found = {}
    for path in filter(None, candidates):
        try:
            out = subprocess.run([path, "-c", PROBE], capture_output=True, text=True, timeout=30,
                                 env=pip_env()).stdout.split()
        except (OSError, subprocess.TimeoutExpired):
            continue
        if len(out) != 7 or out[0] != "cpython" or out[5].startswith("/usr"):
            continue
        version = tuple(int(v) for v in out[1:4])
        if version >= (3, 9):
            found.setdefault(out[5], (version, out[4], out[6] == "True"))
    params = [pytest.param(exe, version[:2], headers, id="%d.%d.%d" % version)
              for version, exe, headers in sorted(found.values())]
    return params or [pytest.param(None, None, False, id="none", marks=pytest.mark.skip(
        reason="no CPython >= 3.9 but Debian's /usr/bin/python3 here ($PYENV_ROOT/versions/3.*,"
               " python3.9 ... python3.19 on PATH outside /usr)"))]


@pytest.mark.parametrize("python,version,headers", other_interpreters())
def test_pip_install_with_another_interpreter(workdir, daemon, python, version, headers):
    # One below requires-python must be refused before any build.
    if not headers:
        pytest.skip("%s has no Python.h: the build needs its headers" % python)
    py = make_venv(python, workdir)
    target = copy_tree(workdir)
    if version < minimum_python():
        with pytest.raises(AssertionError, match="requires a different Python"):
            pip_install(py, target, workdir, "--use-pep517")
        return
    pip_install(py, target, workdir, "--use-pep517")
    check_put_get(py, daemon, workdir)
