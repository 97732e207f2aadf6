"""Builds the ferry Python module from this source tree: `pip install ./python` (in a venv made
with --system-site-packages, for Debian's NumPy) or `python3 setup.py build_ext --inplace`.
The extension compiles libferry's own sources (../src/client, ../src/common), so no build of
the C tree is needed first; it links Debian's libxxhash and libcrypto."""

import os
import re

from setuptools import Extension, setup

HERE = os.path.dirname(os.path.abspath(__file__))
os.chdir(HERE)  # setuptools wants source paths relative to setup.py


def c_sources(folder):
    return sorted(os.path.join(folder, f) for f in os.listdir(folder) if f.endswith(".c"))


def version():
    """The package's __version__, which ferry.h's version macros must match (as CMake checks)."""
    with open(os.path.join("ferry", "__init__.py"), encoding="utf-8") as f:
        text = re.search(r'^__version__ = "([^"]+)"', f.read(), re.M).group(1)
    with open(os.path.join("..", "include", "ferry.h"), encoding="utf-8") as f:
        header = f.read()
    parts = [re.search(r"^#define FERRY_VERSION_%s (\d+)$" % p, header, re.M).group(1)
             for p in ("MAJOR", "MINOR", "PATCH")]
    if ".".join(parts) != text:
        raise SystemExit("ferry.h says %s, ferry/__init__.py %s" % (".".join(parts), text))
    return text


extension = Extension(
    "ferry._ferry",
    sources=c_sources("_ferry") + c_sources("../src/client") + c_sources("../src/common"),
    include_dirs=["../include", "../src"],
    define_macros=[("_GNU_SOURCE", None), ("FERRY_VERSION_STRING", '"%s"' % version())],
    libraries=["xxhash", "crypto"],
    extra_compile_args=["-std=c11", "-fno-strict-aliasing"],
)

setup(
    name="ferry",
    version=version(),
    description="Zero-copy Python client of the ferry distributed in-memory object store",
    packages=["ferry"],
    ext_modules=[extension],
    python_requires=">=3.9",
)
