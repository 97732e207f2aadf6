#!/usr/bin/env python3
"""file-calls.py BUILD_DIR [--list]: which files of a folder of src/ call each other both ways.

Within a folder, files should call one way: each only those below it, as src/directory/'s do.
From the build's objects (nm): file A calls file B when A uses a symbol B defines. A pair that
calls both ways is a knot. scripts/file-calls.allowed lists the pairs known today, to be undone
(issue 35); any other pair fails (make lint), and so does a listed pair that is gone (take it
off the list: the list only shrinks). A folder with no pair listed must have no circle of any
length either: its files then stand in an order, each calling only files below it. --list
prints every pair with the symbols each way, and the order of each such folder, top first."""
import json
import os
import shlex
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ALLOWED = os.path.join(ROOT, "scripts", "file-calls.allowed")


def objects(build):
    """{folder: {file stem: object path}}, one object per source file of src/ that the build
    compiles now (compile_commands.json: stale objects of moved files are not read)."""
    found = {}
    for entry in json.load(open(os.path.join(build, "compile_commands.json"))):
        rel = os.path.relpath(entry["file"], ROOT)
        words = entry.get("arguments") or shlex.split(entry["command"])
        outs = [w[2:] for w in words if w.startswith("-o") and len(w) > 2]
        outs += [b for a, b in zip(words, words[1:]) if a == "-o"]
        if not rel.startswith("src" + os.sep) or len(outs) != 1:
            continue
        obj = os.path.join(entry["directory"], outs[0])
        folder, name = os.path.split(rel)
        found.setdefault(folder, {}).setdefault(name[:-2], obj)
    return found


def symbols(obj):
    defined, used = set(), set()
    out = subprocess.run(["nm", obj], capture_output=True, text=True, check=True).stdout
    for line in out.splitlines():
        p = line.split()
        if len(p) == 3 and p[1] in "TDBRWVi":
            defined.add(p[2])
        elif len(p) == 2 and p[0] == "U":
            used.add(p[1])
    return defined, used


def file_calls(files):
    """{(a, b): symbols a uses that b defines}, for files a != b of one folder."""
    syms = {f: symbols(o) for f, o in files.items()}
    owner = {s: f for f, (d, _) in syms.items() for s in d}
    calls = {}
    for f, (_, used) in syms.items():
        for s in used:
            if owner.get(s, f) != f:
                calls.setdefault((f, owner[s]), set()).add(s)
    return calls


def two_way(calls):
    """{(a, b): (symbols a uses of b, symbols b uses of a)} for a < b calling both ways."""
    return {(a, b): (calls[(a, b)], calls[(b, a)])
            for (a, b) in calls if a < b and (b, a) in calls}


def layers(files, calls):
    """The files in layers, top first: each calls only files of the layers after its own.
    (layers, files on circles): when some cannot be layered, the files left once those that
    nothing left calls, and those that call nothing left, are peeled off (on a circle, or
    between two)."""
    left, out = set(files), []
    while left:
        top = sorted(f for f in left if not any((g, f) in calls for g in left))
        if not top:
            break
        out.append(top)
        left -= set(top)
    while True:
        bottom = {f for f in left if not any((f, g) in calls for g in left)}
        if not bottom:
            return out, sorted(left)
        left -= bottom


def main():
    if len(sys.argv) not in (2, 3) or (len(sys.argv) == 3 and sys.argv[2] != "--list"):
        sys.exit("usage: file-calls.py BUILD_DIR [--list]")
    pairs, circles = set(), []
    allowed = {line.strip() for line in open(ALLOWED)
               if line.strip() and not line.startswith("#")}
    found = objects(sys.argv[1])
    if not found:
        sys.exit("file-calls.py: no objects under " + sys.argv[1])
    for folder, files in sorted(found.items()):
        calls = file_calls(files)
        for (a, b), (ab, ba) in sorted(two_way(calls).items()):
            pairs.add(f"{folder}: {a} {b}")
            if len(sys.argv) == 3:
                print(f"{folder}: {a} <-> {b}: {', '.join(sorted(ab))} / {', '.join(sorted(ba))}")
        if any(p.startswith(folder + ": ") for p in allowed):
            continue
        order, circle = layers(files, calls)
        if circle:
            circles.append(f"{folder}: {' '.join(circle)}")
        elif len(sys.argv) == 3:
            print(f"{folder}: order: {' > '.join(', '.join(layer) for layer in order)}")
    status = 0
    for c in circles:
        print(f"file-calls.py: {c}: files on a circle of calls (a folder with no listed pair "
              "must stand in an order)")
        status = 1
    for p in sorted(pairs - allowed):
        print(f"file-calls.py: {p} call each other both ways (not in {ALLOWED})")
        status = 1
    for p in sorted(allowed - pairs):
        print(f"file-calls.py: {p} no longer call each other both ways: take it off {ALLOWED}")
        status = 1
    print(f"file-calls.py: {len(pairs)} pairs of files calling both ways", file=sys.stderr)
    sys.exit(status)


main()
