"""`pip install ./python` with no network (Debian's setuptools, no build isolation needed), then
`import ferry` from that interpreter: what the README tells users to do."""

import os
import shutil
import subprocess
import sys

from conftest import plain_env

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def test_pip_install_into_a_venv(workdir, daemon):
    # A copy of what setup.py reads, so that the build leaves the source tree as it was.
    src = os.path.join(workdir, "tree")
    for part in ("python", "include", os.path.join("src", "client"), os.path.join("src", "common")):
        shutil.copytree(os.path.join(REPO, part), os.path.join(src, part),
                        ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    venv = os.path.join(workdir, "venv")
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", venv], check=True,
                   timeout=120, env=plain_env())
    py = os.path.join(venv, "bin", "python")
    env = dict(plain_env(), PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1")
    env.pop("PYTHONPATH", None)
    subprocess.run([py, "-m", "pip", "install", "-q", os.path.join(src, "python")], check=True,
                   env=env, timeout=300, cwd=workdir)
    script = (
        "import ferry, numpy, sys\n"
        "assert ferry.__file__.startswith(sys.prefix), ferry.__file__\n"
        "with ferry.Client(sys.argv[1]) as c:\n"
        "    oid = c.put_object({'a': numpy.arange(5)})\n"
        "    print(c.get_object(oid)['a'].sum())\n"
    )
    out = subprocess.run([py, "-c", script, daemon.socket], check=True, env=env, timeout=60,
                         capture_output=True, text=True, cwd=workdir)
    assert out.stdout.strip() == "10"
