/* options.c - the command line of a suite: the options all suites share (--sizes, --seconds,
 * --rounds, --repeat, --seed, --json, --plot, --help) plus the suite's own, handled by the
 * suite. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

#define MAX_LONGOPTS 24
#define DEFAULT_SECONDS 0.1
#define DEFAULT_ROUNDS 5

/* The vals of the shared options that have no letter: above any character. */
enum { OPT_ROUNDS = 1001, OPT_REPEAT, OPT_SEED };

static const struct option common_longopts[] = {
    {"sizes", required_argument, NULL, 'z'},
    {"seconds", required_argument, NULL, 't'},
    {"rounds", required_argument, NULL, OPT_ROUNDS},
    {"repeat", required_argument, NULL, OPT_REPEAT},
    {"seed", required_argument, NULL, OPT_SEED},
    {"json", no_argument, NULL, 'j'},
    {"plot", required_argument, NULL, 'p'},
    {"help", no_argument, NULL, 'h'},
};
#define N_COMMON (sizeof(common_longopts) / sizeof(common_longopts[0]))

static void usage(FILE *f, const struct bench_suite_options *s)
{
    fputs(s->synopsis, f);
    fprintf(f,
            "  --sizes LIST     comma-separated sizes, K/M/G = 2^10/2^20/2^30 bytes, up to %lluM\n"
            "                   (default %s)\n"
            "  --seconds S      measured time of one slice: a system's operation at a size\n"
            "                   within a round (default %g)\n"
            "  --rounds N       interleaved rounds: each measures a slice of every system at\n"
            "                   every size in a shuffled order; figures are medians over the\n"
            "                   rounds, ratios medians of the ratios within each round, with\n"
            "                   their range (1 to %d, default %d)\n"
            "  --repeat N       run the whole comparison N times and show how steady each\n"
            "                   ratio was (1 to %d, default 1)\n"
            "  --seed N         of the shuffled orders (default: a new one, printed)\n"
            "  --json           print a JSON document on stdout, the table on stderr\n"
            "  --plot DIR       also write DIR/%s-throughput.png and DIR/%s-latency.png\n"
            "                   (needs gnuplot)\n",
            BENCH_SIZE_LIMIT >> 20, s->default_sizes, DEFAULT_SECONDS, BENCH_MAX_ROUNDS,
            DEFAULT_ROUNDS, BENCH_MAX_REPEAT, s->name, s->name);
    fputs(s->help, f);
}

uint64_t bench_parse_count(const char *opt, const char *s, uint64_t min, uint64_t max)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (end == s || *end != '\0' || *s == '-' || errno != 0 || v < min || v > max)
        bench_fail("bad %s '%s': expected %llu to %llu", opt, s, (unsigned long long)min,
                   (unsigned long long)max);
    return v;
}

size_t bench_split_list(const char *opt, const char *list, const char **items, size_t max)
{
    size_t n = 0;
    char *copy = strdup(list), *save = NULL;
    if (copy == NULL)
        bench_fail("out of memory for %s", opt);
    bench_free_at_exit(copy);
    for (char *item = strtok_r(copy, ",", &save); item != NULL; item = strtok_r(NULL, ",", &save)) {
        if (n == max)
            bench_fail("bad %s '%s': at most %zu items", opt, list, max);
        items[n++] = item;
    }
    if (n == 0)
        bench_fail("bad %s '%s': expected a comma-separated list", opt, list);
    return n;
}

unsigned bench_parse_choices(const char *opt, const char *list, const char *const *names, size_t n)
{
    const char *items[32];
    unsigned mask = 0;
    size_t k = bench_split_list(opt, list, items, sizeof(items) / sizeof(items[0]));
    for (size_t i = 0; i < k; i++) {
        size_t c = 0;
        while (c < n && strcmp(items[i], names[c]) != 0)
            c++;
        if (c == n)
            bench_fail("bad %s: unknown '%s'", opt, items[i]);
        mask |= 1u << c;
    }
    return mask;
}

static double parse_seconds(const char *s)
{
    char *end;
    double v = strtod(s, &end);
    if (end == s || *end != '\0' || !isfinite(v) || v <= 0 || v > 3600)
        bench_fail("bad --seconds '%s': expected a number of seconds in (0, 3600]", s);
    return v;
}

static int cmp_size(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

/* Sorts the sizes and drops repeats, so that every series runs from small to large. */
static void sort_sizes(struct bench_options *o)
{
    size_t k = 0;
    qsort(o->sizes, o->nsizes, sizeof(o->sizes[0]), cmp_size);
    for (size_t i = 0; i < o->nsizes; i++)
        if (k == 0 || o->sizes[k - 1] != o->sizes[i])
            o->sizes[k++] = o->sizes[i];
    o->nsizes = k;
}

/* The shared long options followed by the suite's, in longopts (MAX_LONGOPTS entries). */
static void merge_longopts(const struct bench_suite_options *s, struct option *longopts)
{
    size_t n = N_COMMON;
    memcpy(longopts, common_longopts, sizeof(common_longopts));
    for (const struct option *e = s->longopts; e != NULL && e->name != NULL; e++) {
        if (n == MAX_LONGOPTS - 1)
            bench_fail("too many options for suite %s", s->name);
        longopts[n++] = *e;
    }
    longopts[n] = (struct option){NULL, 0, NULL, 0};
}

/* One shared option; 0 when ch is not one. */
static int common_option(struct bench_options *o, int ch, const char **sizes)
{
    switch (ch) {
    case 'z':
        *sizes = optarg;
        return 1;
    case 't':
        o->seconds = parse_seconds(optarg);
        return 1;
    case OPT_ROUNDS:
        o->rounds = (unsigned)bench_parse_count("--rounds", optarg, 1, BENCH_MAX_ROUNDS);
        return 1;
    case OPT_REPEAT:
        o->repeat = (unsigned)bench_parse_count("--repeat", optarg, 1, BENCH_MAX_REPEAT);
        return 1;
    case OPT_SEED:
        o->seed = bench_parse_count("--seed", optarg, 0, UINT64_MAX);
        return 1;
    case 'j':
        o->json = 1;
        return 1;
    case 'p':
        o->plot_dir = optarg;
        return 1;
    }
    return 0;
}

int bench_parse_options(int argc, char **argv, const struct bench_suite_options *s,
                        struct bench_options *o)
{
    struct option longopts[MAX_LONGOPTS];
    const char *sizes = s->default_sizes;
    int ch;
    merge_longopts(s, longopts);
    *o = (struct bench_options){
        .seconds = DEFAULT_SECONDS, .rounds = DEFAULT_ROUNDS, .repeat = 1, .seed = bench_nonce()};
    while ((ch = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        if (ch == 'h' || ch == '?') {
            usage(ch == 'h' ? stdout : stderr, s);
            return ch == 'h' ? 0 : 2;
        }
        if (!common_option(o, ch, &sizes))
            s->handle(s->ctx, ch, optarg);
    }
    if (optind != argc) {
        fprintf(stderr, "ferry-bench: unexpected argument '%s'\n", argv[optind]);
        usage(stderr, s);
        return 2;
    }
    o->nsizes = bench_parse_sizes(sizes, o->sizes, BENCH_MAX_SIZES, BENCH_SIZE_LIMIT);
    sort_sizes(o);
    return -1;
}
