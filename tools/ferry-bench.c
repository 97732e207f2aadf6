/*
 * ferry-bench - measures ferry against other ways of moving bytes.
 *
 *   ferry-bench SUITE [OPTIONS]
 *
 * Each suite starts the peers it needs (ferryd, redis-server) unless told where running ones
 * are, and stops them at exit, on failures too. The suites live in tools/bench/.
 */
#include <stdio.h>
#include <string.h>

#include "bench/bench.h"

struct suite {
    const char *name;
    int (*main)(int argc, char **argv);
    const char *summary;
};

#ifndef FERRY_BENCH_MPI
/* The mpi suite of a build that found no MPI. */
static int mpi_missing(int argc, char **argv)
{
    fputs("ferry-bench: built without MPI (CMake found no MPI C library; on Debian: apt-get "
          "install libopenmpi-dev openmpi-bin, then reconfigure)\n",
          stderr);
    return 1;
}
#endif

static const struct suite suites[] = {
    {"local", bench_local, "ferry put/get against redis set/get and memcpy on this node"},
    {"remote", bench_remote, "ferry fetch between two nodes against redis get and raw TCP"},
    {"directory", bench_directory,
     "simulated nodes publishing and looking up against redis-benchmark; --strict-ids' cost"},
    {"gets", bench_gets,
     "get+release by 1 and 2 processes, without the daemon and through it; its CPU per get"},
    {"spill", bench_spill,
     "spilling to disk and reading back against plain O_DIRECT writes and reads; gets meanwhile"},
    {"python", bench_python,
     "the Python module against shared_memory, redis-py, pickle and np.copyto"},
    {"cluster", bench_cluster,
     "pair, gather, shuffle, broadcast, hot small objects on nodes in network namespaces"},
    {"dask", bench_dask,
     "Dask with ferry.dask against Dask's own transfer: rechunk, broadcast, matmul; a testbed"},
#ifdef FERRY_BENCH_MPI
    {"mpi", bench_mpi, "all-to-all and many-to-one fetches between nodes, under mpirun"},
#else
    {"mpi", mpi_missing, "(not in this build: CMake found no MPI)"},
#endif
};

static void usage(FILE *f)
{
    fputs("usage: ferry-bench SUITE [OPTIONS]   (ferry-bench SUITE --help for its options)\n"
          "suites:\n",
          f);
    for (size_t i = 0; i < sizeof(suites) / sizeof(suites[0]); i++)
        fprintf(f, "  %-8s %s\n", suites[i].name, suites[i].summary);
}

int main(int argc, char **argv)
{
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    for (size_t i = 0; i < sizeof(suites) / sizeof(suites[0]); i++) {
        if (strcmp(argv[1], suites[i].name) == 0) {
            bench_install_signals();
            return suites[i].main(argc - 1, argv + 1);
        }
    }
    fprintf(stderr, "ferry-bench: unknown suite '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}
