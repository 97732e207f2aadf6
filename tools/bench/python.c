/* python.c - the suites written in Python: ferry-bench python runs python_bench.py (the
 * Python module beside shared_memory, redis-py, pickle and np.copyto), ferry-bench cluster
 * runs cluster_bench.py (the testbed's workloads), ferry-bench dask runs dask_bench.py (Dask
 * with ferry.dask against Dask's own transfer); all with this build's module, daemon and
 * interpreter. The paths come from CMake. */
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"

/* Execs FERRY_BENCH_SCRIPTS/script with argv[1..]; returns only by bench_fail. */
static int exec_script(const char *script, int argc, char **argv)
{
    char exe[PATH_MAX], path[PATH_MAX + 64], file[PATH_MAX];
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
    snprintf(file, sizeof(file), "%s/%s", FERRY_BENCH_SCRIPTS, script);
    args[0] = FERRY_BENCH_PYTHON;
    args[1] = file;
    for (int i = 1; i < argc; i++)
        args[i + 1] = argv[i];
    execv(args[0], args);
    bench_fail("exec %s: %s", args[0], strerror(errno));
}

int bench_python(int argc, char **argv)
{
    return exec_script("python_bench.py", argc, argv);
}

int bench_cluster(int argc, char **argv)
{
    return exec_script("cluster_bench.py", argc, argv);
}

int bench_dask(int argc, char **argv)
{
    return exec_script("dask_bench.py", argc, argv);
}
