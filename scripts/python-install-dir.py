"""Prints where `make install` puts the Python package for the interpreter running this, under
the install prefix given (relative to it): the directory of the interpreter's own install
schemes for that prefix that is on its sys.path (Debian's python3: lib/python3.11/dist-packages
under /usr/local, lib/python3/dist-packages under /usr), else the posix layout under the prefix
(lib/python3.X/site-packages, which needs PYTHONPATH)."""
import os
import sys
import sysconfig

prefix = os.path.normpath(sys.argv[1])
found = None
for scheme in sysconfig.get_scheme_names():
    if not scheme.startswith(("posix", "deb")) or scheme in ("posix_user", "posix_home", "posix_venv"):
        continue
    # Debian's posix_local adds local/ to its base: /usr gives /usr/local/...
    for base in (prefix, os.path.dirname(prefix)):
        path = sysconfig.get_path("platlib", scheme, vars={"base": base, "platbase": base})
        if path.startswith(prefix + os.sep) and path in sys.path:
            found = found or path
if not found:
    found = sysconfig.get_path("platlib", "posix_prefix", vars={"base": prefix, "platbase": prefix})
print(os.path.relpath(found, prefix))
