/* python.c - ferry-bench python: runs the Python module's benchmark (python_bench.py, beside
 * this file) with this build's module and daemon. The paths come from CMake. */
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"

int bench_python(int argc, char **argv)
{
    char exe[PATH_MAX], path[PATH_MAX + 64];
    const char *old = getenv("PYTHONPATH");
    ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    char **args = calloc((size_t)argc + 2, sizeof(*args));

    if (n <= 0 || !args)
        bench_fail("cannot find this executable's directory: %s", strerror(errno));
    exe[n] = '\0';
    *strrchr(exe, '/') = '\0';
    /* The daemon next to ferry-bench, the module of the same build first on the path. */
    setenv("FERRY_BIN_DIR", exe, 0);
    snprintf(path, sizeof(path), "%s%s%s", FERRY_BENCH_PYTHONPATH, old && *old ? ":" : "",
             old && *old ? old : "");
    setenv("PYTHONPATH", path, 1);
    args[0] = FERRY_BENCH_PYTHON;
    args[1] = FERRY_BENCH_PYTHON_SCRIPT;
    for (int i = 1; i < argc; i++)
        args[i + 1] = argv[i];
    execv(args[0], args);
    bench_fail("exec %s: %s", args[0], strerror(errno));
}
