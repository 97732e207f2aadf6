"""ferry's PEP 517 build backend (pyproject.toml: backend-path ["_build"]): builds the wheel and
the sdist of the Python module with the standard library alone, so that `pip install ./python`
needs no network, no setuptools and no wheel, with or without build isolation, on any CPython
that pyproject.toml's requires-python admits and that has its headers (Python.h).

The extension ferry._ferry is _ferry/*.c compiled with libferry's own sources (src/client,
src/common; headers in include/ and src/), by the compiler and flags the interpreter was built
to give extensions (sysconfig: CC, CFLAGS, CCSHARED, LDSHARED, as distutils used them; CC,
LDSHARED from the environment replace them, CPPFLAGS, CFLAGS, LDFLAGS from it are added), and
linked with libxxhash and libcrypto. Those C sources come from csrc/ beside pyproject.toml when
it is there (an sdist carries them there), else from the source tree around this directory (../).

Everything is written outside the package directory (objects in a temporary directory), so a
build leaves the tree as it was."""

import ast
import base64
import concurrent.futures
import gzip
import hashlib
import io
import os
import re
import shlex
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
import time
import zipfile

PKG_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The C sources of libferry the extension compiles, and the headers they include: relative to
# the tree's top (or csrc/), by directory and file suffixes.
C_DIRS = (("src/client", (".c", ".h")), ("src/common", (".c", ".h")), ("include", (".h",)))
INCLUDE_DIRS = ("include", "src")
DEFINES = ("_GNU_SOURCE",)
# An implicit declaration is a function this Python lacks (a newer API): an error here, not an
# undefined symbol when the module is imported.
CFLAGS = ("-std=c11", "-fno-strict-aliasing", "-Werror=implicit-function-declaration",
          "-Werror=incompatible-pointer-types", "-fvisibility=hidden", "-pthread")
LIBS = ("-lxxhash", "-lcrypto")
NEEDS = ("ferry's extension needs a C compiler, this interpreter's headers and those of "
         "libxxhash and libcrypto (Debian: apt install gcc python3-dev libxxhash-dev libssl-dev)")


class BuildError(Exception):
    """A build that cannot go on; its message says why and what to do."""


# ---- the hooks (PEP 517) ----


def get_requires_for_build_wheel(config_settings=None):
    """Nothing to install: the backend uses the standard library alone."""
    return []


def get_requires_for_build_sdist(config_settings=None):
    """Nothing to install, as for the wheel."""
    return []


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    """Writes NAME-VERSION.dist-info/METADATA into metadata_directory; returns its name."""
    dist_info = "%s.dist-info" % dist_name()
    os.makedirs(os.path.join(metadata_directory, dist_info), exist_ok=True)
    with open(os.path.join(metadata_directory, dist_info, "METADATA"), "wb") as f:
        f.write(metadata())
    return dist_info


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    """Compiles the extension and writes the wheel into wheel_directory; returns its file name.
    The metadata is made again, as prepare_metadata_for_build_wheel made it."""
    name = "%s-%s.whl" % (dist_name(), wheel_tag())
    with tempfile.TemporaryDirectory(prefix="ferry-build.") as tmp:
        extension = compile_extension(tmp)
        write_wheel(os.path.join(wheel_directory, name), extension)
    return name


def build_sdist(sdist_directory, config_settings=None):
    """Writes NAME-VERSION.tar.gz into sdist_directory, with the C sources the extension needs
    under csrc/, so that it builds on its own; returns its file name."""
    name = "%s.tar.gz" % dist_name()
    write_sdist(os.path.join(sdist_directory, name))
    return name


# ---- what is built: metadata, sources, version ----


def c_root():
    """The directory that holds include/ferry.h, src/client and src/common: csrc/ in an sdist,
    the source tree's top otherwise."""
    for root in (os.path.join(PKG_ROOT, "csrc"), os.path.dirname(PKG_ROOT)):
        if os.path.isfile(os.path.join(root, "include", "ferry.h")):
            return root
    raise BuildError(
        "libferry's sources are neither in %s/csrc (an sdist) nor in %s (the source tree): build "
        "from the sdist or from the whole tree (pip >= 21.3, which builds in place; an older pip "
        "copies python/ alone elsewhere)" % (PKG_ROOT, os.path.dirname(PKG_ROOT)))


def read_text(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def version():
    """ferry/__init__.py's __version__, which ferry.h's FERRY_VERSION_MAJOR/MINOR/PATCH must say
    too (as CMake checks its project version); BuildError when they differ."""
    text = read_text(os.path.join(PKG_ROOT, "ferry", "__init__.py"))
    found = re.search(r'^__version__ = "([^"]+)"$', text, re.M)
    header = read_text(os.path.join(c_root(), "include", "ferry.h"))
    parts = [re.search(r"^#define FERRY_VERSION_%s (\d+)$" % p, header, re.M)
             for p in ("MAJOR", "MINOR", "PATCH")]
    if not found or not all(parts):
        raise BuildError("no __version__ in ferry/__init__.py or no FERRY_VERSION_* in ferry.h")
    from_header = ".".join(p.group(1) for p in parts)
    if from_header != found.group(1):
        raise BuildError("ferry.h says version %s, ferry/__init__.py %s: make them agree"
                         % (from_header, found.group(1)))
    return from_header


def project():
    """pyproject.toml's [project] table, checked to hold only what metadata() writes."""
    table = read_pyproject(os.path.join(PKG_ROOT, "pyproject.toml")).get("project", {})
    known = {"name", "dynamic", "description", "readme", "requires-python", "dependencies",
             "optional-dependencies"}
    unknown = sorted(set(table) - known)
    if unknown or table.get("dynamic") != ["version"] or "name" not in table:
        raise BuildError("pyproject.toml's [project] must have a name, dynamic = [\"version\"] "
                         "and no key ferry_build does not write into METADATA: %s" % unknown)
    return table


def dist_name():
    """NAME-VERSION as in the names of wheels, sdists and .dist-info directories."""
    return "%s-%s" % (re.sub(r"[-_.]+", "_", project()["name"]).lower(), version())


def metadata():
    """The core metadata (METADATA, PKG-INFO) of pyproject.toml's [project], as bytes."""
    p = project()
    lines = ["Metadata-Version: 2.1", "Name: " + p["name"], "Version: " + version()]
    if "description" in p:
        if "\n" in p["description"] or "\r" in p["description"]:
            raise BuildError("pyproject.toml: a description is one line (it is METADATA's "
                             "Summary header)")
        lines.append("Summary: " + p["description"])
    if "requires-python" in p:
        lines.append("Requires-Python: " + p["requires-python"])
    lines += ["Requires-Dist: " + r for r in p.get("dependencies", [])]
    for extra, reqs in sorted(p.get("optional-dependencies", {}).items()):
        lines.append("Provides-Extra: " + extra)
        lines += ["Requires-Dist: " + with_extra(r, extra) for r in reqs]
    body = ""
    if "readme" in p:
        kind = {".md": "text/markdown", ".rst": "text/x-rst"}.get(
            os.path.splitext(p["readme"])[1], "text/plain")
        lines.append("Description-Content-Type: %s; charset=UTF-8" % kind)
        body = "\n" + read_text(os.path.join(PKG_ROOT, p["readme"]))
    return ("\n".join(lines) + "\n" + body).encode("utf-8")


def with_extra(requirement, extra):
    """requirement (PEP 508) wanted only with extra: its marker, if any, and extra's."""
    spec, _, marker = requirement.partition(";")
    condition = 'extra == "%s"' % extra
    if marker.strip():
        condition = "(%s) and %s" % (marker.strip(), condition)
    return "%s; %s" % (spec.strip(), condition)


def read_pyproject(path):
    """pyproject.toml as nested dicts: tomllib's reading where there is one (Python 3.11+); before,
    read_pyproject_subset's."""
    try:
        import tomllib
    except ImportError:
        return read_pyproject_subset(path)
    with open(path, "rb") as f:
        try:
            return tomllib.load(f)
        except tomllib.TOMLDecodeError as e:
            raise BuildError("%s: %s" % (path, e)) from None


def read_pyproject_subset(path):
    """pyproject.toml as tomllib reads it, for Pythons without tomllib. Reads the subset of TOML
    the file uses: comments, [a.b] table headers and, on one line each, key = value with a string
    or an array of strings; anything else raises BuildError, so that a construct outside it is
    refused rather than misread."""
    tables, table = {}, None
    for n, line in enumerate(read_text(path).splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        header = re.fullmatch(r"\[([A-Za-z0-9_.-]+)\]", line)
        pair = re.fullmatch(r"([A-Za-z0-9_-]+)\s*=\s*(.+)", line)
        if header:
            table = tables
            for key in header.group(1).split("."):
                table = table.setdefault(key, {})
            continue
        value = None
        if pair and table is not None:
            try:
                value = ast.literal_eval(pair.group(2))
            except (ValueError, SyntaxError):
                pass
        if not (isinstance(value, str) or (isinstance(value, list)
                                           and all(isinstance(v, str) for v in value))):
            raise BuildError("%s:%d: ferry_build reads only [tables] and key = \"string\" or "
                             "[\"strings\"] on one line: %r" % (path, n, line))
        table[pair.group(1)] = value
    return tables


# ---- the extension ----


def python_headers():
    """The interpreter's include directories; BuildError when Python.h is not there."""
    paths = sysconfig.get_paths()
    dirs = list(dict.fromkeys([paths["include"], paths["platinclude"]]))
    if not os.path.isfile(os.path.join(dirs[0], "Python.h")):
        raise BuildError("%s has no Python.h: install this interpreter's headers (Debian: "
                         "python3-dev). %s" % (dirs[0], NEEDS))
    return dirs


def toolchain():
    """(compile command, link command) as lists, each to be followed by its inputs and
    outputs: what distutils ran for this interpreter (see the module's doc)."""
    var, env = sysconfig.get_config_var, os.environ
    cc = env.get("CC") or var("CC")
    ldshared = env.get("LDSHARED") or var("LDSHARED")
    if "CC" in env and "LDSHARED" not in env and ldshared.startswith(var("CC")):
        ldshared = cc + ldshared[len(var("CC")):]
    compile_cmd = " ".join([cc, var("CFLAGS") or "", var("CCSHARED") or "",
                            env.get("CPPFLAGS", ""), env.get("CFLAGS", "")])
    link_cmd = " ".join([ldshared, env.get("LDFLAGS", ""), env.get("CFLAGS", "")])
    return shlex.split(compile_cmd), shlex.split(link_cmd)


def extension_sources(root):
    """The .c files of the extension: _ferry/ and libferry's under root."""
    dirs = [os.path.join(PKG_ROOT, "_ferry")]
    dirs += [os.path.join(root, d) for d, suffixes in C_DIRS if ".c" in suffixes]
    return [os.path.join(d, f) for d in dirs for f in sorted(os.listdir(d)) if f.endswith(".c")]


def compile_extension(build_dir):
    """Compiles and links ferry._ferry in build_dir, the sources in parallel (one job per CPU
    this process may use); returns the path of the module. BuildError, with the compiler's
    output, when a step fails."""
    root, headers = c_root(), python_headers()
    compile_cmd, link_cmd = toolchain()
    flags = ["-I" + os.path.join(root, d) for d in INCLUDE_DIRS] + ["-I" + d for d in headers]
    flags += ["-D" + d for d in DEFINES] + ['-DFERRY_VERSION_STRING="%s"' % version()]
    flags += list(CFLAGS)
    jobs = []
    for i, src in enumerate(extension_sources(root)):
        obj = os.path.join(build_dir, "%02d-%s.o" % (i, os.path.basename(src)[:-2]))
        jobs.append((compile_cmd + flags + ["-c", src, "-o", obj], obj))
    with concurrent.futures.ThreadPoolExecutor(max_workers=len(os.sched_getaffinity(0))) as pool:
        list(pool.map(run, [cmd for cmd, _ in jobs]))
    module = os.path.join(build_dir, "_ferry" + sysconfig.get_config_var("EXT_SUFFIX"))
    run(link_cmd + [obj for _, obj in jobs] + list(LIBS) + ["-o", module])
    return module


def run(cmd):
    """Runs a compiler command, echoing it and its output; BuildError when it fails."""
    try:
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              universal_newlines=True)
    except OSError as e:
        raise BuildError("cannot run %s: %s. %s" % (cmd[0], e, NEEDS)) from e
    print(shlex.join(cmd) + "\n" + proc.stdout, end="", flush=True)  # one write: jobs run at once
    if proc.returncode != 0:
        raise BuildError("%s failed (exit %d):\n%s\n%s" % (cmd[0], proc.returncode, proc.stdout,
                                                           NEEDS))


# ---- the archives ----


def wheel_tag():
    """PYTHON-ABI-PLATFORM of this interpreter (the wheel spec; packaging.tags says the same):
    cp311-cp311-linux_x86_64. CPython only."""
    if sys.implementation.name != "cpython":
        raise BuildError("ferry's extension builds for CPython only, not %s"
                         % sys.implementation.name)
    python = "cp%d%d" % sys.version_info[:2]
    abi = "cp" + sysconfig.get_config_var("SOABI").split("-")[1]  # cpython-311-x86_64-linux-gnu
    platform = re.sub(r"[-.]", "_", sysconfig.get_platform())
    return "%s-%s-%s" % (python, abi, platform)


def archive_time():
    """The timestamp of archive members: $SOURCE_DATE_EPOCH when set (reproducible builds)."""
    return max(int(os.environ.get("SOURCE_DATE_EPOCH", time.time())), 315532800)  # >= 1980


def record_line(name, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return "%s,sha256=%s,%d\n" % (name, digest, len(data))


def write_wheel(path, extension):
    """The wheel at path: the package's .py files, the extension, and .dist-info's METADATA,
    WHEEL and RECORD (each file's sha256 and size, as the wheel spec says)."""
    dist_info = "%s.dist-info" % dist_name()
    members = [("ferry/" + f, read_bytes(os.path.join(PKG_ROOT, "ferry", f)), 0o644)
               for f in sorted(os.listdir(os.path.join(PKG_ROOT, "ferry"))) if f.endswith(".py")]
    members.append(("ferry/" + os.path.basename(extension), read_bytes(extension), 0o755))
    members.append((dist_info + "/METADATA", metadata(), 0o644))
    wheel = ("Wheel-Version: 1.0\nGenerator: ferry_build\nRoot-Is-Purelib: false\nTag: %s\n"
             % wheel_tag())
    members.append((dist_info + "/WHEEL", wheel.encode(), 0o644))
    record = "".join(record_line(name, data) for name, data, _ in members)
    members.append((dist_info + "/RECORD", (record + dist_info + "/RECORD,,\n").encode(), 0o644))
    stamp = time.gmtime(archive_time())[:6]
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data, mode in members:
            info = zipfile.ZipInfo(name, date_time=stamp)
            info.external_attr = (0o100000 | mode) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(info, data)


def read_bytes(path):
    with open(path, "rb") as f:
        return f.read()


def sdist_members():
    """(name in the sdist, path) of the files it carries besides PKG-INFO: the package
    directory's pyproject.toml, README.md, backend, Python and C files, and libferry's
    sources (C_DIRS) under csrc/."""
    members = [(n, os.path.join(PKG_ROOT, n)) for n in ("pyproject.toml", "README.md")]
    for d, suffixes in (("_build", (".py",)), ("ferry", (".py",)), ("_ferry", (".c", ".h"))):
        members += files_of(PKG_ROOT, d, suffixes, d)
    root = c_root()
    for d, suffixes in C_DIRS:
        members += files_of(root, d, suffixes, "csrc/" + d)
    return members


def files_of(root, folder, suffixes, prefix):
    """(prefix/name, path) of the files of root/folder that end with one of suffixes."""
    path = os.path.join(root, folder)
    return [(prefix + "/" + f, os.path.join(path, f)) for f in sorted(os.listdir(path))
            if f.endswith(suffixes)]


def write_sdist(path):
    """The sdist at path: a gzipped POSIX (pax) tar of NAME-VERSION/, files owned by root,
    mode 644, PKG-INFO first."""
    top, stamp = dist_name(), archive_time()
    members = [("PKG-INFO", metadata())] + [(n, read_bytes(p)) for n, p in sdist_members()]
    with open(path, "wb") as f, gzip.GzipFile(fileobj=f, mode="wb", mtime=stamp) as gz, \
            tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, data in members:
            info = tarfile.TarInfo("%s/%s" % (top, name))
            info.size, info.mtime, info.mode = len(data), stamp, 0o644
            tar.addfile(info, io.BytesIO(data))
